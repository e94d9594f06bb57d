"""``python -m sopt.problems.fit_cloth [CONFIG] [overrides...] [--out DIR]``: the same as
``sopt run --problem fit_cloth ...`` (see sopt.experiments.cli)."""

import sys

from sopt.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "--problem", "fit_cloth", *sys.argv[1:]]))

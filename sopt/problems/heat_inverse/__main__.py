"""``python -m sopt.problems.heat_inverse [CONFIG] [overrides...] [--out DIR]``: the same as
``sopt run --problem heat_inverse ...`` (see sopt.experiments.cli)."""

import sys

from sopt.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "--problem", "heat_inverse", *sys.argv[1:]]))

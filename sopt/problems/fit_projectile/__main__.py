"""``python -m sopt.problems.fit_projectile [CONFIG] [overrides...] [--out DIR]``: the same as
``sopt run --problem fit_projectile ...`` (see sopt.experiments.cli)."""

import sys

from sopt.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "--problem", "fit_projectile", *sys.argv[1:]]))

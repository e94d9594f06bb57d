"""``python -m sopt.problems.nbody_masses [CONFIG] [overrides...] [--out DIR]``: the same as
``sopt run --problem nbody_masses ...`` (see sopt.experiments.cli)."""

import sys

from sopt.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "--problem", "nbody_masses", *sys.argv[1:]]))

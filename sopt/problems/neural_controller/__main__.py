"""``python -m sopt.problems.neural_controller [CONFIG] [overrides...] [--out DIR]``: the same as
``sopt run --problem neural_controller ...`` (see sopt.experiments.cli)."""

import sys

from sopt.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "--problem", "neural_controller", *sys.argv[1:]]))

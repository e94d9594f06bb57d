"""``python -m problems.heat_inverse [--config FILE] [--steps N] [--out DIR] [--resume DIR] [--no-progress]``."""

from problems.fitting.cli import entry_point
from problems.heat_inverse.problem import HeatInverse

if __name__ == "__main__":
    entry_point(HeatInverse)

"""``python -m sopt.problems.heat_inverse [--config FILE] [--steps N] [--out DIR] [--resume DIR] [--no-progress]``."""

from sopt.problems.fitting.cli import entry_point
from sopt.problems.heat_inverse.problem import HeatInverse

if __name__ == "__main__":
    entry_point(HeatInverse)

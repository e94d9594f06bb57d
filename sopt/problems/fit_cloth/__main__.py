"""``python -m sopt.problems.fit_cloth [--config FILE] [--steps N] [--out DIR] [--resume DIR] [--no-progress]``."""

from sopt.problems.fit_cloth.problem import FitCloth
from sopt.problems.fitting.cli import entry_point

if __name__ == "__main__":
    entry_point(FitCloth)

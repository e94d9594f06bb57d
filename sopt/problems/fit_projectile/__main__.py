"""``python -m sopt.problems.fit_projectile [--config FILE] [--steps N] [--out DIR] [--resume DIR] [--no-progress]``."""

from sopt.problems.fit_projectile.problem import FitProjectile
from sopt.problems.fitting.cli import entry_point

if __name__ == "__main__":
    entry_point(FitProjectile)

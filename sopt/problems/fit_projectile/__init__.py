"""fit_projectile: a bouncing ball's drag, restitution, launch speed and angle recovered from its observed
positions (see problem.py and README.md). Run ``python -m sopt.problems.fit_projectile [--config FILE] [--steps N]
[--out DIR] [--resume DIR]`` from the repository root."""

from sopt.problems.fit_projectile.problem import FitProjectile, ProjectileConfig

__all__ = ["FitProjectile", "ProjectileConfig"]

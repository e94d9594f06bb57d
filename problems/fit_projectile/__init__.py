"""fit_projectile: a bouncing ball's drag, restitution, launch speed and angle recovered from its observed
positions (see problem.py and README.md).
Run ``sopt run --problem fit_projectile [CONFIG] [overrides...]``
(or ``python -m problems.fit_projectile ...``, the same command)."""

from problems.fit_projectile.problem import FitProjectile, ProjectileConfig

__all__ = ["FitProjectile", "ProjectileConfig"]

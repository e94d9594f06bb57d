"""fit_cloth: a swinging cloth's spring stiffness (shared or one per spring) and damping recovered from the observed
positions of its particles (see problem.py and README.md).
Run ``sopt run --problem fit_cloth [CONFIG] [overrides...]``
(or ``python -m problems.fit_cloth ...``, the same command)."""

from problems.fit_cloth.problem import ClothConfig, FitCloth

__all__ = ["ClothConfig", "FitCloth"]

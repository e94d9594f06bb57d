"""fit_cloth: a swinging cloth's spring stiffness (shared or one per spring) and damping recovered from the observed
positions of its particles (see problem.py and README.md). Run ``python -m sopt.problems.fit_cloth [--config FILE]
[--steps N] [--out DIR] [--resume DIR]`` from the repository root."""

from sopt.problems.fit_cloth.problem import ClothConfig, FitCloth

__all__ = ["ClothConfig", "FitCloth"]

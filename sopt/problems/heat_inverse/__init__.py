"""heat_inverse: a plate's conductivity field (an inclusion of another material) recovered from the temperatures of
a grid of sensors (see problem.py and README.md). Run ``python -m sopt.problems.heat_inverse [--config FILE] [--steps N]
[--out DIR] [--resume DIR]`` from the repository root."""

from sopt.problems.heat_inverse.problem import HeatConfig, HeatInverse

__all__ = ["HeatConfig", "HeatInverse"]

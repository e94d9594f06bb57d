"""heat_inverse: a plate's conductivity field (an inclusion of another material) recovered from the temperatures of
a grid of sensors (see problem.py and README.md).
Run ``sopt run --problem heat_inverse [CONFIG] [overrides...]``
(or ``python -m problems.heat_inverse ...``, the same command)."""

from problems.heat_inverse.problem import HeatConfig, HeatInverse

__all__ = ["HeatConfig", "HeatInverse"]

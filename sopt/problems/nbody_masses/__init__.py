"""nbody_masses: recover the masses of a gravitating cluster from observed trajectories (see problem.py).

Run ``python -m sopt.problems.nbody_masses [--config FILE] [--steps N] [--out DIR] [--resume DIR]``.
"""

from sopt.problems.nbody_masses.problem import NBodyMasses, NBodyMassesConfig, ring_layout

__all__ = ["NBodyMasses", "NBodyMassesConfig", "ring_layout"]

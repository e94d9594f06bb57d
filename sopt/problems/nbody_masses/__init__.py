"""nbody_masses: recover the masses of a gravitating cluster from observed trajectories (see problem.py).

Run ``sopt run --problem nbody_masses [CONFIG] [overrides...]``
(or ``python -m sopt.problems.nbody_masses ...``, the same command).
"""

from sopt.problems.nbody_masses.problem import NBodyMasses, NBodyMassesConfig, ring_layout

__all__ = ["NBodyMasses", "NBodyMassesConfig", "ring_layout"]

"""nbody_masses: recover the masses of a gravitating cluster from observed trajectories (see problem.py).

Run ``sopt run --problem nbody_masses [CONFIG] [overrides...]``
(or ``python -m problems.nbody_masses ...``, the same command).
"""

from problems.nbody_masses.problem import NBodyMasses, NBodyMassesConfig, ring_layout

__all__ = ["NBodyMasses", "NBodyMassesConfig", "ring_layout"]

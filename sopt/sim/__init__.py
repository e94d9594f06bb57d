"""Differentiable simulators (kernels in slang_lib/sim/): one interface, :class:`Simulator`, stepping a
:class:`State`; every physical parameter and the initial state may be a trainable :class:`sopt.Parameter`.
Each is registered in the ``"simulator"`` family of :mod:`sopt.config.registry` with a config of its constant
physical parameters and dt (the initial state and geometry are build arguments).

Names load on first use (:mod:`sopt.utils.lazy_exports`): ``from sopt.sim import Projectile`` imports no other
simulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports
# the names of sopt.sim.rollout's own module: imported here, as rollout's first import makes sopt.sim.rollout the module
from sopt.sim.rollout import Plan, RolloutResult, plan, rollout


__getattr__, __dir__ = lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.sim.coefficient import Coefficient
    from sopt.sim.diffusion2d import Diffusion2D, Diffusion2DConfig
    from sopt.sim.fused_steps import FusedSteps
    from sopt.sim.nbody import NBody, NBodyConfig
    from sopt.sim.projectile import Projectile, ProjectileConfig
    from sopt.sim.simulator import Simulator
    from sopt.sim.spring_system import SpringSystem, SpringSystemConfig
    from sopt.sim.state import State
    from sopt.sim.wave2d import Wave2D, Wave2DConfig

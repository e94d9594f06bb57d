"""Differentiable simulators (kernels in slang_lib/sim/): one interface, :class:`Simulator`, stepping a
:class:`State`; every physical parameter and the initial state may be a trainable :class:`sopt.Parameter`.
Each is registered in the ``"simulator"`` family of :mod:`sopt.config.registry` with a config of its constant
physical parameters and dt (the initial state and geometry are build arguments)."""

from sopt.sim.coefficient import Coefficient
from sopt.sim.diffusion2d import Diffusion2D, Diffusion2DConfig
from sopt.sim.fused_steps import FusedSteps
from sopt.sim.nbody import NBody, NBodyConfig
from sopt.sim.projectile import Projectile, ProjectileConfig
from sopt.sim.rollout import Plan, RolloutResult, plan, rollout
from sopt.sim.simulator import Simulator
from sopt.sim.spring_system import SpringSystem, SpringSystemConfig
from sopt.sim.state import State
from sopt.sim.wave2d import Wave2D, Wave2DConfig

__all__ = ["Coefficient", "Diffusion2D", "Diffusion2DConfig", "FusedSteps", "NBody", "NBodyConfig", "Plan",
           "Projectile", "ProjectileConfig", "RolloutResult", "Simulator", "SpringSystem", "SpringSystemConfig",
           "State", "Wave2D", "Wave2DConfig", "plan", "rollout"]

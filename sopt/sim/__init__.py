"""Differentiable simulators (kernels in slang_lib/sim/): one interface, :class:`Simulator`, stepping a
:class:`State`; every physical parameter and the initial state may be a trainable :class:`sopt.Parameter`."""

from sopt.sim.coefficient import Coefficient
from sopt.sim.diffusion2d import Diffusion2D
from sopt.sim.nbody import NBody
from sopt.sim.projectile import Projectile
from sopt.sim.rollout import Plan, RolloutResult, plan, rollout
from sopt.sim.simulator import Simulator
from sopt.sim.spring_system import SpringSystem
from sopt.sim.state import State
from sopt.sim.wave2d import Wave2D

__all__ = ["Coefficient", "Diffusion2D", "NBody", "Plan", "Projectile", "RolloutResult", "Simulator", "SpringSystem", "State", "Wave2D",
           "plan", "rollout"]

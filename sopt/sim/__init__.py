"""Differentiable simulators (kernels in slang_lib/sim/): one interface, :class:`Simulator`, stepping a
:class:`State`; every physical parameter and the initial state may be a trainable :class:`sopt.Parameter`."""

from sopt.sim.coefficient import Coefficient
from sopt.sim.rollout import Plan, RolloutResult, plan, rollout
from sopt.sim.simulator import Simulator
from sopt.sim.state import State

__all__ = ["Coefficient", "Plan", "RolloutResult", "Simulator", "State", "plan", "rollout"]

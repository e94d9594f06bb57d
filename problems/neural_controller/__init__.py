"""neural_controller: an MLP trained through a mass-spring simulator to make a 2D robot walk (see problem.py).

Run ``sopt run --problem neural_controller [CONFIG] [overrides...]``
(or ``python -m problems.neural_controller ...``, the same command).
"""

from problems.neural_controller.controller import NeuralController, walk_loss
from problems.neural_controller.problem import NeuralControllerConfig, NeuralControllerProblem
from problems.neural_controller.robot import Robot, build_robot

__all__ = ["NeuralController", "NeuralControllerConfig", "NeuralControllerProblem", "Robot", "build_robot",
           "walk_loss"]

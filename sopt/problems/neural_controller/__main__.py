"""Command line: ``python -m sopt.problems.neural_controller [--config FILE] [--steps N] [--out DIR] [--resume DIR]``."""

from sopt.problems.fitting.cli import entry_point
from sopt.problems.neural_controller.problem import NeuralControllerProblem

entry_point(NeuralControllerProblem)

"""Command line: ``python -m problems.neural_controller [--config FILE] [--steps N] [--out DIR] [--resume DIR]``."""

from problems.fitting.cli import entry_point
from problems.neural_controller.problem import NeuralControllerProblem

entry_point(NeuralControllerProblem)

"""Command line: ``python -m sopt.problems.nbody_masses [--config FILE] [--steps N] [--out DIR] [--resume DIR]``."""

from sopt.problems.fitting.cli import entry_point
from sopt.problems.nbody_masses.problem import NBodyMasses

entry_point(NBodyMasses)

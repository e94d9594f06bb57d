"""Command line: ``python -m problems.nbody_masses [--config FILE] [--steps N] [--out DIR] [--resume DIR]``."""

from problems.fitting.cli import entry_point
from problems.nbody_masses.problem import NBodyMasses

entry_point(NBodyMasses)

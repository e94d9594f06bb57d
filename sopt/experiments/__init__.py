"""Experiments from config files: the ``sopt`` command (:mod:`~sopt.experiments.cli`), run directories, the
runner with resume and clean interruption, sweeps and reports. Imported lazily by the command, not by ``import
sopt``."""

"""``python -m sopt ...``: the ``sopt`` command (sopt.experiments.cli)."""

from sopt.experiments.cli import entry_point

entry_point()

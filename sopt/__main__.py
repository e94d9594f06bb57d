"""``python -m sopt ...``: the ``sopt`` command (sopt.experiments.cli)."""

import sys

from sopt.experiments.cli import main

sys.exit(main())

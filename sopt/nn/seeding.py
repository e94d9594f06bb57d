"""Child seeds for the parameters of a module: independent random streams from one user seed."""

from __future__ import annotations

import numpy as np

from sopt.utils.validation import check_int


def derive_seed(seed: int, *path: int) -> int:
    """A 32-bit seed for the parameter at ``path`` (e.g. layer index, parameter index) under ``seed``.

    Different paths give statistically independent numpy streams (``SeedSequence`` spawning), unlike
    ``seed + k``, where layer 0's bias and layer 1's weight would draw the same numbers.
    """
    seed = check_int(seed, "seed", low=0)
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0])

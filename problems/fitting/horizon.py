"""The horizon curriculum of the physics fits: the loss first sees the start of the observed window, then a window
growing linearly to all of it. Over a long window a parameter a little off puts the simulation out of phase with
the observations (a ball bouncing at other times, a cloth a period behind), and the loss has local minima there;
the first observations fix the parameters in the right basin, the whole window then sharpens them."""

from __future__ import annotations


def horizon_fraction(step: int, steps: int, start: float, ramp: float) -> float:
    """The fraction of the observed window the loss of optimiser step ``step`` sees: ``start`` at step 0, growing
    linearly to 1 at ``ramp`` x ``steps`` (then 1)."""
    span = ramp * steps
    progress = 1.0 if span <= 0 else min(1.0, step / span)
    return start + (1.0 - start) * progress

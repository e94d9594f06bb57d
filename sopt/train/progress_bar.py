"""The tqdm bar of a training run (:class:`TrainingBar`), in a module of its own so that only a run that shows a
bar imports tqdm (:func:`sopt.train.progress.training_bar`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ContextManager

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

if TYPE_CHECKING:   # progress imports this module when it makes a bar
    from sopt.train.progress import TrainingRate


class TrainingBar(tqdm):   # type: ignore[misc]  # tqdm.auto's class: the terminal one, or a notebook's
    """A tqdm bar over steps whose rate (and so ETA) is ``self.training_rate``'s, not tqdm's own average.

    tqdm computes the remaining time from the rate in :attr:`format_dict`; a rate of 0 shows ``?`` for both."""

    training_rate: TrainingRate | None = None

    @property
    def format_dict(self) -> dict[str, Any]:
        info = super().format_dict
        if self.training_rate is not None:
            info["rate"] = self.training_rate.rate() or 0.0   # 0: unknown (None would fall back to tqdm's average)
        return info

    def redirect_logging(self, logger: logging.Logger) -> ContextManager[None]:
        """While entered, ``logger``'s records are printed above the bar rather than through it."""
        return logging_redirect_tqdm(loggers=[logger], tqdm_class=type(self))

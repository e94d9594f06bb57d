"""Problem: what a problem provides to ``sopt run`` (sopt.experiments.runner), and the keys every config has.

A problem is a class with a ``name`` (its ``problem = "..."`` key), a ``schema`` (a :class:`ProblemConfig`
subclass whose ``problem`` field is ``Literal[name]``) and a one-line ``description``. ``Problem(config)`` builds
everything the training needs (data, model or simulator, optimiser, schedule) from a validated config, before any
file is written; the runner then trains it with :class:`sopt.train.Trainer` and writes the run directory::

    trainer = Trainer(**problem.trainer_parts(), callbacks=[*parts.callbacks, logger, checkpoint, stop], ...)
    trainer.fit(config.steps)
    final = problem.finish(run_dir, history)      # the problem's own files (result.json, pictures)

``trainer_parts()`` returns the keyword arguments of :class:`sopt.train.Trainer` that the problem owns:
``objective`` (or ``model``, ``loss_fn`` and ``sampler``), ``optimizer``, ``scheduler``, ``parameters`` (name ->
Parameter, what checkpoints save) and ``callbacks`` (the problem's own, e.g. an evaluation). The runner adds
``log_every``, ``progress``, the metrics logger, the checkpoint and the stop-on-signal callbacks.
"""

from __future__ import annotations

import pathlib
from typing import Any, ClassVar

from pydantic import Field

from sopt.config.schema import StrictModel


class ProblemConfig(StrictModel):
    """The keys every problem's config has. A problem's schema subclasses it, redeclares ``problem`` as
    ``Literal["<name>"] = "<name>"`` and may change the defaults of the others by redeclaring them."""

    problem: str = Field(description="the problem this config runs (sopt problems lists them)")
    steps: int = Field(300, ge=1, le=10_000_000, description="optimiser steps")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of every random choice (data, noise, init)")
    log_every: int = Field(10, ge=1, le=10_000_000, description="steps between metrics records "
                                                                "(each waits for the GPU)")
    checkpoint_every: int = Field(100, ge=1, le=10_000_000, description="steps between checkpoints")


class Problem:
    """Base class of a problem run by ``sopt run`` (see the module docstring)."""

    name: ClassVar[str]
    schema: ClassVar[type[ProblemConfig]]
    description: ClassVar[str] = ""

    def __init__(self, config: ProblemConfig) -> None:
        if not isinstance(config, self.schema):
            raise ValueError(f"{type(self).__name__} needs a {self.schema.__name__}, got {type(config).__name__}")
        self.config = config

    def trainer_parts(self) -> dict[str, Any]:
        """Keyword arguments of sopt.train.Trainer the problem owns (objective or model/loss_fn/sampler,
        optimizer, scheduler, parameters, callbacks)."""
        raise NotImplementedError

    def finish(self, run_dir: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, float]:
        """After the last step: write the problem's own files into ``run_dir`` (result.json, pictures) and return
        its final metrics (name -> number) for summary.json. ``history``: every metrics record of the run,
        resumed parts included."""
        return {}

    def summary(self) -> list[str]:
        """Lines printed at the end of a run (after finish)."""
        return []

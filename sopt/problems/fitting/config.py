"""Configuration of a fitting problem: pydantic v2 schemas, JSON files merged over the defaults, one-line errors.

Every problem's config is a :class:`FitConfig` subclass (its ``true`` and ``init`` sections, and any keys of its
own). All models derive from :class:`StrictModel`: unknown keys are errors, types are strict (``"0.01"`` is no
float, ``"no"`` or ``0`` no bool, ``1.0`` no int; an int is a float), floats are finite, numbers carry bounds
(``Field(ge=..., le=...)``) and every field has a one-line description with its unit. ``Schema.model_json_schema()``
documents a problem's config in full.

The ``optimizer`` and ``schedule`` sections are tiny-cuda-nn style (an ``otype`` and its keys): any optimiser or
schedule of :mod:`sopt.config.registry`, built with ``build("optimizer", ...)`` / ``build("schedule", ...)``. The
optimiser's learning rate is in normalised units (1 = one scale; see sopt.problems.fitting.scaled_parameter). A
user config (a JSON object, e.g. from
``--config FILE``) is merged over the defaults: a section updates the default's entries, unless it names another
``otype``, which replaces the section. Duplicate JSON keys are errors.

Every problem found in a config becomes one line of a :class:`ConfigError`: the dotted key, the value, and what
is allowed (``config optimizer.learnig_rate = 0.1: unknown key; did you mean 'learning_rate'? allowed: ...``).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field

from sopt.config.files import read_config
from sopt.config.registry import union
from sopt.config.schema import StrictModel, defaults, merge, validate
from sopt.experiments.problem import ProblemConfig
from sopt.optim import AdamConfig, AdamWConfig, SGDConfig  # noqa: F401  (imported from here by the problems)
from sopt.optim.lr_scheduler import ConstantConfig, ExponentialConfig, StepConfig, WarmupCosineConfig


# -- optimiser and schedule sections: the registry's (sopt.config.registry), under the names problems import ------
OptimizerConfig = union("optimizer")    # any registered optimiser: Adam, AdamW, SGD, RMSprop, Adagrad, ...
ScheduleConfig = union("schedule")      # any registered schedule: Constant, WarmupCosine, Step, Exponential, ...
ConstantSchedule = ConstantConfig
WarmupCosineSchedule = WarmupCosineConfig
StepSchedule = StepConfig
ExponentialSchedule = ExponentialConfig


class FitConfig(ProblemConfig):
    """Keys every fitting problem has (besides ProblemConfig's problem, steps, seed, log_every, checkpoint_every). A problem's schema subclasses it and declares ``true`` and ``init`` (a
    StrictModel of its parameters, with the documented ranges as bounds on ``true``) and its own keys."""

    true: StrictModel = Field(default_factory=StrictModel, description="the true parameter values (make the data)")
    init: StrictModel = Field(default_factory=StrictModel, description="the initial guess of the fit")
    noise_std: float = Field(0.0, ge=0.0, description="std of the Gaussian noise added to the observations "
                                                      "(their unit; 0: noise-free)")
    optimizer: OptimizerConfig = Field(default_factory=lambda: AdamConfig(learning_rate=0.05),
                                       description="optimiser, tiny-cuda-nn style")
    schedule: ScheduleConfig = Field(default_factory=WarmupCosineSchedule, description="learning-rate schedule")


def observation_steps(duration: float, dt: float, observations: int) -> list[int]:
    """The steps of ``observations`` evenly spaced observations over ``duration`` (s) in steps of ``dt`` (s), the
    last at the end; ValueError unless duration / dt is a whole number of steps that ``observations`` divides."""
    steps = round(duration / dt)
    if steps < 1 or steps % observations or abs(steps * dt - duration) > 1e-9 * duration:
        raise ValueError(f"config duration / dt = {duration / dt:g} steps must be a whole multiple of observations = "
                         f"{observations} (duration {duration:g} s, dt {dt:g} s)")
    stride = steps // observations
    return [stride * (i + 1) for i in range(observations)]


def load_config(schema: type[FitConfig], path: str | os.PathLike[str] | None = None,
                overrides: dict[str, Any] | None = None) -> FitConfig:
    """The defaults of ``schema``, with the TOML or JSON file at ``path`` and then ``overrides`` (a nested dict, e.g.
    ``{"steps": 50}`` from ``--steps``) merged over them, validated. ConfigError (one line per problem)."""
    data = defaults(schema)
    if path is not None:
        data = merge(data, read_config(path))
    if overrides:
        data = merge(data, overrides)
    return validate(schema, data)

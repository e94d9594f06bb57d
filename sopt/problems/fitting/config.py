"""Configuration of a fitting problem: pydantic v2 schemas, JSON files merged over the defaults, one-line errors.

Every problem's config is a :class:`FitConfig` subclass (its ``true`` and ``init`` sections, and any keys of its
own). All models derive from :class:`StrictModel`: unknown keys are errors, types are strict (``"0.01"`` is no
float, ``"no"`` or ``0`` no bool, ``1.0`` no int; an int is a float), floats are finite, numbers carry bounds
(``Field(ge=..., le=...)``) and every field has a one-line description with its unit. ``Schema.model_json_schema()``
documents a problem's config in full.

The ``optimizer`` and ``schedule`` sections are neural_field_image's tiny-cuda-nn style (an ``otype`` and its
keys) and are built by its ``build_optimizer`` / ``build_scheduler``. A user config (a JSON object, e.g. from
``--config FILE``) is merged over the defaults: a section updates the default's entries, unless it names another
``otype``, which replaces the section. Duplicate JSON keys are errors.

Every problem found in a config becomes one line of a :class:`ConfigError`: the dotted key, the value, and what
is allowed (``config optimizer.learnig_rate = 0.1: unknown key; did you mean 'learning_rate'? allowed: ...``).
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from sopt.config.files import read_config
from sopt.config.schema import StrictModel, defaults, merge, validate
from sopt.experiments.problem import ProblemConfig


# -- optimiser and schedule sections (neural_field_image's layout; built by its build_optimizer/scheduler) ------
class AdamConfig(StrictModel):
    """Adam (torch.optim.Adam's rule) on the normalised parameters (see sopt.problems.fitting.scaled_parameter)."""

    otype: Literal["Adam"] = "Adam"
    learning_rate: float = Field(0.05, gt=0.0, le=10.0, description="step size in normalised units (1 = one scale)")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="first-moment decay")
    beta2: float = Field(0.99, ge=0.0, lt=1.0, description="second-moment decay")
    epsilon: float = Field(1e-8, gt=0.0, description="added to the root of the second moment")
    weight_decay: float = Field(0.0, ge=0.0, description="L2 penalty on the normalised parameters")
    max_grad_norm: float | None = Field(None, gt=0.0, description="clip the global gradient norm to this (None: off)")


class AdamWConfig(AdamConfig):
    """AdamW: Adam with decoupled weight decay."""

    otype: Literal["AdamW"] = "AdamW"   # type: ignore[assignment]
    weight_decay: float = Field(1e-2, ge=0.0, description="decoupled weight decay (per step, times the lr)")


class SGDConfig(StrictModel):
    """SGD with optional (Nesterov) momentum."""

    otype: Literal["SGD"] = "SGD"
    learning_rate: float = Field(0.01, gt=0.0, le=10.0, description="step size in normalised units")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="momentum factor")
    nesterov: bool = Field(False, description="Nesterov momentum (needs momentum > 0)")
    weight_decay: float = Field(0.0, ge=0.0, description="L2 penalty on the normalised parameters")
    max_grad_norm: float | None = Field(None, gt=0.0, description="clip the global gradient norm to this (None: off)")

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> "SGDConfig":
        if self.nesterov and self.momentum <= 0.0:
            raise ValueError("nesterov needs momentum > 0")
        return self


OptimizerConfig = Annotated[Union[AdamConfig, AdamWConfig, SGDConfig], Field(discriminator="otype")]


class ConstantSchedule(StrictModel):
    """The learning rate stays at the optimizer's."""

    otype: Literal["Constant"] = "Constant"


class WarmupCosineSchedule(StrictModel):
    """Linear warmup, then cosine decay to final_lr_factor times the learning rate at the last step."""

    otype: Literal["WarmupCosine"] = "WarmupCosine"
    warmup_steps: int = Field(0, ge=0, description="steps of linear warmup (steps)")
    final_lr_factor: float = Field(0.01, ge=0.0, le=1.0, description="final lr / initial lr")


class StepSchedule(StrictModel):
    """The learning rate times gamma every step_size steps."""

    otype: Literal["Step"] = "Step"
    step_size: int | None = Field(None, ge=1, description="steps between decays (None: a third of the run)")
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="decay factor")


class ExponentialSchedule(StrictModel):
    """The learning rate times gamma every step."""

    otype: Literal["Exponential"] = "Exponential"
    gamma: float = Field(0.999, gt=0.0, le=1.0, description="decay factor per step")


ScheduleConfig = Annotated[Union[ConstantSchedule, WarmupCosineSchedule, StepSchedule, ExponentialSchedule],
                           Field(discriminator="otype")]


class FitConfig(ProblemConfig):
    """Keys every fitting problem has (besides ProblemConfig's problem, steps, seed, log_every, checkpoint_every). A problem's schema subclasses it and declares ``true`` and ``init`` (a
    StrictModel of its parameters, with the documented ranges as bounds on ``true``) and its own keys."""

    true: StrictModel = Field(default_factory=StrictModel, description="the true parameter values (make the data)")
    init: StrictModel = Field(default_factory=StrictModel, description="the initial guess of the fit")
    noise_std: float = Field(0.0, ge=0.0, description="std of the Gaussian noise added to the observations "
                                                      "(their unit; 0: noise-free)")
    optimizer: OptimizerConfig = Field(default_factory=AdamConfig, description="optimiser, tiny-cuda-nn style")
    schedule: ScheduleConfig = Field(default_factory=WarmupCosineSchedule, description="learning-rate schedule")

    def builder_dict(self) -> dict[str, Any]:
        """The ``optimizer``/``schedule``/``steps`` dict neural_field_image's builders read (None keys dropped, so
        their defaults apply)."""
        return {"optimizer": self.optimizer.model_dump(exclude_none=True),
                "schedule": self.schedule.model_dump(exclude_none=True), "steps": self.steps}


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

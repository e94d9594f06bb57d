"""Configuration of a fitting problem: pydantic v2 schemas, config files merged over the defaults, one-line errors.

Every problem's config is a :class:`FitConfig` subclass (its ``true`` and ``init`` sections, and any keys of its
own). All models derive from :class:`StrictModel`: unknown keys are errors, types are strict (``"0.01"`` is no
float, ``"no"`` or ``0`` no bool, ``1.0`` no int; an int is a float), floats are finite, numbers carry bounds
(``Field(ge=..., le=...)``) and every field has a one-line description with its unit. ``Schema.model_json_schema()``
documents a problem's config in full.

The ``optimizer`` and ``schedule`` sections are tiny-cuda-nn style (an ``otype`` and its keys): any optimiser or
schedule of :mod:`sopt.config.registry`, built with ``build("optimizer", ...)`` / ``build("schedule", ...)``. The
optimiser's learning rate is in normalised units (1 = one scale; see problems.fitting.scaled_parameter). A
user config (a TOML or JSON file, ``sopt run FILE``) is merged over the defaults: a section updates the default's
entries, unless it names another ``otype``, which replaces the section. Duplicate keys are errors.

Every problem found in a config becomes one line of a :class:`ConfigError`: the dotted key, the value, and what
is allowed (``config optimizer.learnig_rate = 0.1: unknown key; did you mean 'learning_rate'? allowed: ...``).
"""

from __future__ import annotations

from pydantic import Field

from sopt.config.registry import union
from sopt.config.schema import StrictModel
from sopt.experiments.problem import ProblemConfig, load_config  # noqa: F401  (imported from here by the problems)
from sopt.optim import AdamConfig, AdamWConfig, SGDConfig  # noqa: F401  (imported from here by the problems)
from sopt.optim.lr_scheduler import WarmupCosineConfig


# -- optimiser and schedule sections: the registry's (sopt.config.registry), under the names problems import ------
OptimizerConfig = union("optimizer")    # any registered optimiser: Adam, AdamW, SGD, RMSprop, Adagrad, ...
ScheduleConfig = union("schedule")      # any registered schedule: Constant, WarmupCosine, Step, Exponential, ...


class FitConfig(ProblemConfig):
    """Keys every fitting problem has (besides ProblemConfig's problem, steps, seed, log_every, checkpoint_every).
    A problem's schema subclasses it with its name (``class MyConfig(FitConfig, problem="my_problem")``) and
    declares ``true`` and ``init`` (a StrictModel of its parameters, with the documented ranges as bounds on
    ``true``) and its own keys."""

    true: StrictModel = Field(default_factory=StrictModel, description="the true parameter values (make the data)")
    init: StrictModel = Field(default_factory=StrictModel, description="the initial guess of the fit")
    noise_std: float = Field(0.0, ge=0.0, description="std of the Gaussian noise added to the observations "
                                                      "(their unit; 0: noise-free)")
    optimizer: OptimizerConfig = Field(default_factory=lambda: AdamConfig(learning_rate=0.05),
                                       description="optimiser, tiny-cuda-nn style")
    schedule: ScheduleConfig = Field(default_factory=WarmupCosineConfig, description="learning-rate schedule")


def observation_steps(duration: float, dt: float, observations: int) -> list[int]:
    """The steps of ``observations`` evenly spaced observations over ``duration`` (s) in steps of ``dt`` (s), the
    last at the end; ValueError unless duration / dt is a whole number of steps that ``observations`` divides."""
    steps = round(duration / dt)
    if steps < 1 or steps % observations or abs(steps * dt - duration) > 1e-9 * duration:
        raise ValueError(f"config duration / dt = {duration / dt:g} steps must be a whole multiple of observations = "
                         f"{observations} (duration {duration:g} s, dt {dt:g} s)")
    stride = steps // observations
    return [stride * (i + 1) for i in range(observations)]

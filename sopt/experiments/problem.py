"""Problem: what a problem provides to ``sopt run`` (sopt.experiments.runner), the keys every config has, and the
registry that finds a problem by the name a config gives.

A problem is a class with a ``schema`` (a :class:`ProblemConfig` subclass declared with the problem's name,
``class MyConfig(ProblemConfig, problem="my_problem")``: its ``problem = "..."`` key and its folder under ``runs/``)
and a one-line ``description``; those two class attributes are its whole registration (``Problem.__init_subclass__``
checks them and sets the class's ``name`` from the schema).
``Problem(config)`` builds everything the training needs (data, model or simulator, optimiser, schedule) from a
validated config, before any file is written; the runner then trains it with :class:`sopt.train.Trainer` and writes
the run directory::

    trainer = Trainer(**problem.trainer_parts(), callbacks=[*parts.callbacks, logger, checkpoint, stop], ...)
    trainer.fit(config.steps)
    final = problem.finish(run_dir, history)      # the problem's own files (result.json, pictures)

``trainer_parts()`` returns the keyword arguments of :class:`sopt.train.Trainer` that the problem owns:
``objective`` (or ``model``, ``loss_fn`` and ``sampler``), ``optimizer``, ``scheduler``, ``parameters`` (name ->
Parameter, what checkpoints save) and ``callbacks`` (the problem's own, e.g. an evaluation). The runner adds
``log_every``, ``progress``, the metrics logger, the checkpoint and the stop-on-signal callbacks.

:func:`problem_class` finds the class a config's ``problem`` names, three ways, each imported only when named (so
``sopt run`` imports one problem): a built-in (:data:`BUILTIN_PROBLEMS`), an entry point of the ``problems``
group of an installed package (``my_problem = "my_package.problem:MyProblem"`` under
``[project.entry-points."sopt.problems"]`` in its pyproject.toml), or ``"module:Class"`` for a class in any module
on the Python path. A config never runs code beyond importing the module it names.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import pathlib
import re
from typing import Any, ClassVar, TypeVar

from pydantic import ConfigDict, Field, model_validator

from sopt.config.files import read_config
from sopt.config.schema import ConfigError, StrictModel, defaults, merge, validate
from sopt.utils.validation import float32_problem

ENTRY_POINT_GROUP = "sopt.problems"

# The built-in problems: name -> (module, class), like the entry points of an installed package; each module is
# imported only when its problem is named, and its class's ``name`` must be the key (problem_class checks it).
BUILTIN_PROBLEMS: dict[str, tuple[str, str]] = {
    "neural_field_image": ("problems.neural_field_image.problem", "NeuralFieldImage"),
    "fit_projectile": ("problems.fit_projectile.problem", "FitProjectile"),
    "nbody_masses": ("problems.nbody_masses.problem", "NBodyMasses"),
    "neural_controller": ("problems.neural_controller.problem", "NeuralControllerProblem"),
    "fit_cloth": ("problems.fit_cloth.problem", "FitCloth"),
    "heat_inverse": ("problems.heat_inverse.problem", "HeatInverse"),
    "neural_radiance": ("problems.neural_radiance.problem", "NeuralRadiance"),
    "neural_sdf": ("problems.neural_sdf.problem", "NeuralSDF"),
}

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # a problem's name: also a folder name under runs/
SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")   # module:Class


class ProblemConfig(StrictModel):
    """The keys every problem's config has. A problem's schema subclasses it with the problem's name,
    ``class MyConfig(ProblemConfig, problem="my_problem")`` (the ``problem`` key's default), and may change the
    defaults of the others by redeclaring them.

    Its pydantic schema, and its subclasses', is built on first use (``defer_build``): the bases (this class,
    FitConfig) are never validated, and a problem's schema is built when ``sopt run`` first checks its config
    (the defaults), still before any GPU work."""

    model_config = ConfigDict(defer_build=True)

    problem_name: ClassVar[str | None] = None   # the problem's name, from the class statement

    problem: str = Field(description="the problem this config runs: a name sopt problems lists, or module:Class")
    steps: int = Field(300, ge=1, le=10_000_000, description="optimiser steps")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of every random choice (data, noise, init)")
    log_every: int = Field(10, ge=1, le=10_000_000, description="steps between metrics records "
                                                                "(each waits for the GPU)")
    checkpoint_every: int = Field(100, ge=1, le=10_000_000, description="steps between checkpoints")
    cuda_graph: bool = Field(False, description="on CUDA, replay the training steps between metrics records from a "
                                                "CUDA graph (Trainer(cuda_graph=True)); recorded as usual elsewhere "
                                                "and with several processes")

    def __init_subclass__(cls, problem: str | None = None, **kwargs: Any) -> None:
        """``class MyConfig(ProblemConfig, problem="my_problem")``: the one place a problem's name is stated (the
        Problem whose ``schema`` this is takes it as its ``name``). TypeError for a name that is no identifier."""
        super().__init_subclass__(**kwargs)
        if problem is not None:
            if not isinstance(problem, str) or not NAME.fullmatch(problem):
                raise TypeError(f"class {cls.__name__}(..., problem={problem!r}): a problem's name must be an "
                                "identifier (letters, digits, _): it names its folder under runs/")
            cls.problem_name = problem

    @model_validator(mode="before")
    @classmethod
    def _default_problem(cls, data: Any) -> Any:
        if isinstance(data, dict) and "problem" not in data and cls.problem_name is not None:
            return {"problem": cls.problem_name, **data}
        return data

    @model_validator(mode="after")
    def _own_problem(self) -> "ProblemConfig":
        # the name, or the module:Class spec a user's problem was found by (written to config.toml for resume)
        name = type(self).problem_name
        if name is not None and self.problem != name and not SPEC.fullmatch(self.problem):
            raise ValueError(f"problem = {self.problem!r} is not this config's problem; allowed: {name!r} or "
                             "module:Class")
        return self

    @model_validator(mode="after")
    def _scheduled_lrs_in_float32(self) -> "ProblemConfig":
        # each lr a schedule reaches as a fixed factor of the learning rate (WarmupCosine's final_lr_factor and
        # warmup_start_factor, Constant's factor) must mean what it says in float32, as the lr itself must: the
        # scheduler would refuse it too, but only once training is being set up, after the run folder exists
        lr = getattr(getattr(self, "optimizer", None), "learning_rate", None)
        schedule = getattr(self, "schedule", None)
        if not isinstance(lr, float) or schedule is None:
            return self
        for key, factor in schedule:
            if key.endswith("factor") and isinstance(factor, float):
                problem = float32_problem(lr * factor, "learning_rate * factor")
                if problem is not None:
                    raise ValueError(f"schedule.{key} = {factor:g} with optimizer.learning_rate = {lr:g} gives "
                                     f"the lr {lr * factor:g}: {problem}")
        return self


C = TypeVar("C", bound=ProblemConfig)


def load_config(schema: type[C], path: str | os.PathLike[str] | None = None,
                overrides: dict[str, Any] | None = None) -> C:
    """The defaults of ``schema``, with the TOML or JSON file at ``path`` and then ``overrides`` (a nested dict,
    e.g. ``{"steps": 50}``) merged over them, validated: a problem's config from Python, as ``sopt run FILE``
    builds it. ConfigError (one line per problem)."""
    data = defaults(schema)
    if path is not None:
        data = merge(data, read_config(path))
    if overrides:
        data = merge(data, overrides)
    return validate(schema, data)


class Problem:
    """Base class of a problem run by ``sopt run`` (see the module docstring)."""

    name: ClassVar[str]
    schema: ClassVar[type[ProblemConfig]]
    description: ClassVar[str] = ""
    # whether ``sopt run --nproc N`` may train it on N processes: its trainer_parts' sampler is a
    # sopt.train.BatchSampler, which sopt.distributed splits; checked before the problem is built
    splits_batch: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """The registration: a class that sets ``schema`` (a ProblemConfig subclass declared with
        ``problem="<name>"``) is the problem of that name; its ``name`` is the schema's. TypeError (one line)
        otherwise, or for a class stating its own ``name`` (the schema states it, once)."""
        super().__init_subclass__(**kwargs)
        where = f"{cls.__module__}.{cls.__qualname__}"
        if "name" in cls.__dict__:
            raise TypeError(f"{where} sets name; a problem's name is its schema's: class MyConfig(ProblemConfig, "
                            "problem=\"my_problem\")")
        if "schema" not in cls.__dict__:
            return   # a base class (FittingProblem) or a subclass keeping its parent's schema and name
        schema = cls.schema
        if not (isinstance(schema, type) and issubclass(schema, ProblemConfig)) or schema.problem_name is None:
            raise TypeError(f"{where}.schema = {schema!r}: must be a ProblemConfig subclass declared with its "
                            "problem's name: class MyConfig(ProblemConfig, problem=\"my_problem\")")
        cls.name = schema.problem_name

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

    def input_files(self) -> list[pathlib.Path]:
        """The files this run reads as data; a run records their fingerprint and ``sopt resume`` refuses changed
        ones. None by default (a problem whose data is generated)."""
        return []


def problem_names() -> list[str]:
    """The names a config's ``problem`` may give: the built-ins, then the ``sopt.problems`` entry points of
    installed packages (nothing is imported)."""
    names = list(BUILTIN_PROBLEMS)
    return names + sorted(n for n in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP).names if n not in names)


def problem_class(spec: object, where: str = "problem") -> type[Problem]:
    """The Problem class ``spec`` names: a built-in or entry-point name, or ``"module:Class"``; its module is
    imported. ConfigError (one line, naming ``where`` and the value) for an unknown name (with a suggestion), a
    module that is missing or fails to import, a missing attribute or one that is no Problem subclass."""
    shown = repr(spec) if spec is not None else "(missing)"

    def fail(why: str) -> ConfigError:
        return ConfigError([f"config {where} = {shown}: {why}"])

    if isinstance(spec, str) and ":" in spec:
        if not SPEC.fullmatch(spec):
            raise fail("not module:Class (e.g. my_package.problem:MyProblem)")
        module_name, attribute = spec.split(":")
        cls = getattr(_import(module_name, fail), attribute, None)
        if cls is None:
            raise fail(f"module {module_name!r} has no attribute {attribute!r}")
        if not (isinstance(cls, type) and issubclass(cls, Problem) and getattr(cls, "name", None)):
            raise fail(f"{attribute!r} is not a sopt Problem subclass with a name and a schema "
                       "(sopt.experiments.problem.Problem)")
        return cls
    if isinstance(spec, str) and spec in BUILTIN_PROBLEMS:   # a built-in name wins over an entry point's: the
        module_name, attribute = BUILTIN_PROBLEMS[spec]     # entry points (slow to list) are not looked at
        cls = getattr(_import(module_name, fail), attribute)
    else:
        names = problem_names()
        if not isinstance(spec, str) or spec not in names:
            near = difflib.get_close_matches(str(spec), names, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise fail(f"unknown problem{hint} allowed: {', '.join(names)}")
        (entry,) = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP).select(name=spec)
        try:
            cls = entry.load()
        except Exception as exc:   # the package's own import failed: one line, not its traceback
            raise fail(f"entry point {entry.value!r} does not load: {type(exc).__name__}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Problem)) or getattr(cls, "name", None) != spec:
        raise fail(f"registered as {spec!r}, but it gives {cls!r}, which is not a Problem named {spec!r}")
    return cls


def _import(module_name: str, fail: Any) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = f"no module named {exc.name!r}" if exc.name else str(exc)
        raise fail(f"{missing} (is its folder on PYTHONPATH?)") from None
    except Exception as exc:   # the module's own code failed: one line, not its traceback
        raise fail(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None

"""FittingProblem: what a physics-fitting problem provides to a run (sopt.experiments.runner, ``sopt run``): its
optimiser and schedule, per-step parameter metrics, result.json and pictures.

A problem subclasses :class:`FittingProblem`, sets its ``schema`` (declared with its name) and ``description``,
and in ``__init__`` builds its simulator, makes the observations from ``config.true`` (plus seeded noise,
:meth:`add_noise`) and creates its trainable parameters from ``config.init`` with :meth:`add_parameter`. It
implements :meth:`objective`; the runner does the rest (optimiser, schedule, Trainer, metrics, checkpoints, resume, result.json, the shared
pictures). Sketch::

    class Values(StrictModel):
        damping: float = Field(0.25, gt=0.0, le=2.0, description="damping rate (1/s)")

    class PendulumConfig(FitConfig, problem="fit_pendulum"):
        true: Values = Field(default_factory=Values, description="true values (make the data)")
        init: Values = Field(default_factory=lambda: Values(damping=0.05), description="initial guess")

    class Pendulum(FittingProblem):
        schema = PendulumConfig
        description = "a damped pendulum's damping rate from its swing"

        def __init__(self, config: PendulumConfig) -> None:
            super().__init__(config)
            self.damping = self.add_parameter("damping", config.init.damping, scale=0.5, unit="1/s")
            self.observed = self.add_noise(simulate(config.true.damping))       # numpy, float32
            self.target = slangpy.Tensor.from_numpy(sopt.get_device(), self.observed)

        def objective(self, tape, step):
            return MSELoss()(simulate_on_tape(self.damping.physical), self.target)

Trainable values are normalised (:class:`~problems.fitting.scaled_parameter.ScaledParameter`): the optimiser
steps ``physical / scale``; the simulator reads ``.physical``, which ``__call__`` (the Trainer's objective)
refreshes on the tape before calling :meth:`objective`.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, ClassVar

import numpy as np

from sopt.config.registry import build
from sopt.experiments.problem import Problem
from sopt.experiments.run_dir import write_json
from problems.fitting.config import FitConfig
from problems.fitting.plot import plot_history
from problems.fitting.scaled_parameter import ScaledParameter
from problems.fitting.uncertainty import RELATIVE_STEP, central_jacobian, gauss_newton_std
from sopt.autodiff.parameter import Parameter
from sopt.autodiff.tape import Tape
from sopt.train import Callback, Trainer, loss_scalar

# seed streams of FittingProblem.rng (the SeedSequence spawn key after config.seed)
NOISE_STREAM = 0     # the observation noise
START_STREAM = 1     # random initial guesses (a problem's multi-start)
# the optimised loss in a metrics record whose ``loss`` is the result's (FittingProblem.result_loss)
OBJECTIVE_METRIC = "loss_sum"
RESERVED_METRICS = ("step", "loss", OBJECTIVE_METRIC, "lr", "steps_per_s", "time_s", "skipped_steps")
MAX_LOGGED_ELEMENTS = 64   # a parameter with more elements logs only its rel_error per metrics step
RESULT_FILE, CURVES_FILE = "result.json", "curves.png"

Value = float | np.ndarray


def rel_error(fitted: Value, true: Value) -> float:
    """|fitted - true| / |true| for a number, ||fitted - true||_2 / ||true||_2 for an array; the absolute error
    where the true value is 0 (no relative error exists there)."""
    f = np.asarray(fitted, np.float64)
    t = np.asarray(true, np.float64)
    if f.shape != t.shape:
        raise ValueError(f"rel_error: fitted has shape {f.shape}, true {t.shape}")
    diff = float(np.linalg.norm((f - t).ravel()))
    norm = float(np.linalg.norm(t.ravel()))
    return diff / norm if norm > 0.0 else diff


def as_value(array: Any) -> Value:
    """A float for one element, else a float64 array."""
    a = np.asarray(array, np.float64)
    return float(a.reshape(-1)[0]) if a.size == 1 else a


class FittingProblem(Problem):
    """Base class of a fitting problem (see the module docstring for how one plugs in).

    Class attributes: ``name`` (the package under problems/, e.g. ``"fit_projectile"``), ``schema`` (its
    :class:`~problems.fitting.config.FitConfig` subclass), ``description`` (one line for ``--help``).

    Subclasses implement :meth:`objective` and may override :meth:`fitted`, :meth:`true_values`,
    :meth:`evaluate`, :meth:`predict` (then result.json reports each parameter's :meth:`uncertainty`),
    :meth:`progress_metrics`, :meth:`plot` and :meth:`summary`.
    """

    name: ClassVar[str]
    schema: ClassVar[type[FitConfig]]
    description: ClassVar[str] = ""

    def __init__(self, config: FitConfig) -> None:
        super().__init__(config)
        self.scaled: dict[str, ScaledParameter] = {}
        self.std: dict[str, Value] | None = None   # uncertainty() at the end of the run (write_result)

    # -- helpers for subclasses --------------------------------------------------------------------------------
    def add_parameter(self, name: str, initial: Any, scale: float, unit: str = "", *, low: float | None = None,
                      high: float | None = None) -> ScaledParameter:
        """A trainable physical parameter ``name`` starting at ``initial`` (physical units), normalised by
        ``scale`` (its typical magnitude) and kept within [``low``, ``high``] (see ScaledParameter); it appears in
        result.json, metrics and checkpoints under ``name``."""
        if name in self.scaled:
            raise ValueError(f"{type(self).__name__}: parameter {name!r} added twice")
        if name in RESERVED_METRICS or "/" in name:
            raise ValueError(f"{type(self).__name__}: parameter name {name!r} is reserved or holds '/'")
        p = ScaledParameter(name, initial, scale, unit, low=low, high=high)
        self.scaled[name] = p
        return p

    def rng(self, stream: int) -> np.random.Generator:
        """numpy Generator seeded by (config.seed, stream): NOISE_STREAM, START_STREAM, or a problem's own >= 2."""
        return np.random.default_rng(np.random.SeedSequence(self.config.seed, spawn_key=(int(stream),)))

    def add_noise(self, clean: np.ndarray) -> np.ndarray:
        """``clean`` + Gaussian noise of std ``config.noise_std`` (seeded; NOISE_STREAM), as float32."""
        clean = np.asarray(clean, np.float64)
        noise = self.rng(NOISE_STREAM).standard_normal(clean.shape) * self.config.noise_std
        return (clean + noise).astype(np.float32)

    # -- the runner's interface ------------------------------------------------------------------------------------
    def __call__(self, tape: Tape, step: int) -> Any:
        """The Trainer's objective: refresh every ScaledParameter's physical values, then :meth:`objective`."""
        for p in self.scaled.values():
            p.record()
        return self.objective(tape, step)

    def objective(self, tape: Tape, step: int) -> Any:
        """Record the forward of step ``step`` on ``tape`` and return the loss (a sopt loss value, a float32
        array whose sum is the loss, or a list of those): the Trainer's contract."""
        raise NotImplementedError

    def parameters(self) -> dict[str, Parameter]:
        """Name -> trainable Parameter: what the optimiser steps and checkpoints save."""
        return {name: p.trainable for name, p in self.scaled.items()}

    def trainer_parts(self) -> dict[str, Any]:
        """The objective (this problem), its parameters, the configured optimiser and schedule, and the callback
        adding :meth:`progress_metrics` to every metrics record (sopt.experiments.problem.Problem)."""
        params = self.parameters()
        optimizer, scheduler = build_training(self.config, list(params.values()))
        return {"objective": self, "optimizer": optimizer, "scheduler": scheduler, "parameters": params,
                "callbacks": [ProblemMetrics(self)]}

    def finish(self, run_dir: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, float]:
        """result.json (``true``, ``fitted``, ``uncertainty`` (one standard deviation per fitted value, for a
        problem with :meth:`predict`), ``rel_error``, ``loss`` at the fitted values, ``steps``), curves.png
        and the problem's own pictures; returns ``loss`` and ``rel_error/<name>`` for summary.json."""
        result = write_result(self, run_dir, history)
        self.result = result
        return {"loss": result["loss"], **{f"rel_error/{k}": v for k, v in result["rel_error"].items()}}

    def units(self) -> dict[str, str]:
        """Name -> unit of each parameter (for plots and messages)."""
        return {name: p.unit for name, p in self.scaled.items()}

    def true_values(self) -> dict[str, Value]:
        """Name -> true value (a float, or an array for a vector or field): ``config.true`` by default."""
        return {k: as_value(v) for k, v in self.config.true.model_dump().items()}

    def fitted(self) -> dict[str, Value]:
        """Name -> fitted value now, shaped as in :meth:`true_values` (waits for the GPU)."""
        return {name: as_value(p.numpy()) for name, p in self.scaled.items()}

    def evaluate(self) -> float:
        """The loss at the current parameters (a forward pass on a tape of its own, no optimiser step, as the
        objective of step ``config.steps``): the ``loss`` of result.json. Problems whose :meth:`fitted` picks among
        candidates pick here."""
        tape = Tape()
        with tape:
            loss = self(tape, self.config.steps)
        tape.submit()
        return loss_scalar(loss)

    def predict(self, points: list[dict[str, Value]]) -> np.ndarray:
        """The simulated observations at each parameter point (name -> value, shaped as :meth:`fitted`), run now
        without a tape: (len(points), n) float64, each row laid out as ``np.ravel(self.observed)``. A problem
        that does not override it (no cheap forward model) reports no ``uncertainty``."""
        raise NotImplementedError(f"{type(self).__name__} has no forward model for its uncertainty")

    def _flat_fit(self, at: dict[str, Value] | None) -> tuple[np.ndarray, Any, dict[str, np.ndarray]]:
        """``at`` (default :meth:`fitted`) as one float64 vector, the function mapping such a vector back to name
        -> value, and each element's ``scale``, ``low`` and ``high`` (its ScaledParameter's)."""
        fitted = self.fitted() if at is None else at
        names = [n for n in self.scaled if n in fitted]
        shapes = {n: np.shape(fitted[n]) for n in names}
        sizes = [int(np.prod(shapes[n])) for n in names]
        split = np.cumsum(sizes)[:-1]

        def values(vector: np.ndarray) -> dict[str, Value]:
            return {n: as_value(v.reshape(shapes[n])) for n, v in zip(names, np.split(vector, split))}

        x = np.concatenate([np.ravel(fitted[n]) for n in names]).astype(np.float64)
        return x, values, {a: np.repeat([getattr(self.scaled[n], a) for n in names], sizes)
                           for a in ("scale", "low", "high")}

    def jacobian(self, at: dict[str, Value] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(the predictions at ``at`` (default :meth:`fitted`) (n,), their Jacobian (n, p)) in those values,
        flattened in their order, by central differences through :meth:`predict` (problems.fitting.uncertainty)
        at RELATIVE_STEP x each parameter's scale, within its bounds."""
        x, values, box = self._flat_fit(at)
        return central_jacobian(lambda points: self.predict([values(v) for v in points]), x,
                                RELATIVE_STEP * box["scale"], box["low"], box["high"])

    def uncertainty(self, at: dict[str, Value] | None = None) -> dict[str, Value] | None:
        """Name -> one standard deviation of each value of ``at`` (default :meth:`fitted`, and shaped as it), from
        the Gauss-Newton covariance there: :meth:`jacobian` and the noise variance ``noise_std^2``, or the
        residuals' where that is 0; None for a problem without :meth:`predict`."""
        if type(self).predict is FittingProblem.predict:   # no forward model
            return None
        centre, jac = self.jacobian(at)
        residuals = np.ravel(np.asarray(self.observed, np.float64)) - centre
        return self._flat_fit(at)[1](gauss_newton_std(jac, residuals, self.config.noise_std))

    def result_loss(self) -> float | None:
        """The loss of the fit's result at the metrics step just read, where that is not the optimised loss; None
        (the default) where it is. A multi-start fit optimises the sum of its starts' losses and reports the best
        start's: overriding this makes every metrics record's ``loss`` the best start's, as summary.json's,
        result.json's and the console's final ``loss`` are, and logs the optimised sum as ``loss_sum``. So one loss
        ranks runs everywhere: ``sopt sweep``'s best line and pruning, ``sopt report``'s best, the curves."""
        return None

    def progress_metrics(self) -> dict[str, float | list[float]]:
        """Values added to every metrics record: ``value/<name>`` (a float, or a list for up to
        MAX_LOGGED_ELEMENTS elements) and ``rel_error/<name>`` of :meth:`fitted` against :meth:`true_values`."""
        out: dict[str, float | list[float]] = {}
        truth = self.true_values()
        for name, value in self.fitted().items():
            a = np.asarray(value, np.float64)
            if a.size <= MAX_LOGGED_ELEMENTS:
                out[f"value/{name}"] = float(value) if isinstance(value, float) else [float(v) for v in a.ravel()]
            if name in truth:
                out[f"rel_error/{name}"] = rel_error(value, truth[name])
        return out

    def plot(self, out_dir: pathlib.Path, history: list[dict[str, Any]]) -> list[pathlib.Path]:
        """Write the problem's own pictures into ``out_dir`` (the loss and parameter histories are drawn by the
        runner); returns the files written. ``history``: every metrics record of the run, resumed ones too."""
        return []

    def summary(self) -> list[str]:
        """Lines printed after the run (besides the runner's table of true, fitted and relative error)."""
        return []


class ProblemMetrics(Callback):
    """Adds the problem's :meth:`~FittingProblem.progress_metrics` (parameter values and errors) to every metrics
    record, and makes its ``loss`` the :meth:`~FittingProblem.result_loss` where the problem has one (the optimised
    loss kept as ``loss_sum``), before the scheduler, the loggers and the checkpoint see it."""

    order = 10

    def __init__(self, problem: FittingProblem) -> None:
        super().__init__(None)
        self.problem = problem

    def on_metrics(self, trainer: Trainer, metrics: dict[str, Any]) -> None:
        result = self.problem.result_loss()
        if result is not None:
            metrics[OBJECTIVE_METRIC] = metrics["loss"]
            metrics["loss"] = float(result)
        for key, value in self.problem.progress_metrics().items():
            if key in RESERVED_METRICS:
                raise ValueError(f"{type(self.problem).__name__}.progress_metrics: {key!r} is a Trainer metric")
            metrics[key] = value


def _jsonable(value: Any) -> Any:
    """numpy values as JSON numbers or (nested) lists; NaN/Inf as None (JSON has none)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def build_training(config: FitConfig, params: list[Any]) -> tuple[Any, Any]:
    """The optimiser over ``params`` and the learning-rate schedule that ``config`` names (sopt.config.registry)."""
    optimizer = build("optimizer", config.optimizer, params)
    return optimizer, build("schedule", config.schedule, optimizer, config.steps)


def write_result(problem: FittingProblem, out: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, Any]:
    """result.json, curves.png and the problem's pictures in ``out``; returns result.json's content."""
    loss = problem.evaluate()
    fitted, truth = problem.fitted(), problem.true_values()
    problem.std = problem.uncertainty()   # computed once: the problem's plot and summary show it too
    result = {"true": truth, "fitted": fitted,
              **({} if problem.std is None else {"uncertainty": problem.std}),
              "rel_error": {name: rel_error(fitted[name], truth[name]) for name in truth if name in fitted},
              "loss": loss, "steps": problem.config.steps}
    write_json(out / RESULT_FILE, _jsonable(result))
    plot_history(history, truth, problem.units(), out / CURVES_FILE, title=problem.name)
    problem.plot(out, history)
    return json.loads(json.dumps(_jsonable(result)))

"""Trainer: the training loop, one command buffer per step, the host waiting for the GPU only to read metrics.

A training step is an **objective** ``objective(tape, step) -> loss`` recorded on a :class:`sopt.Tape`; the
Trainer then records the backward and the optimiser's step into the same encoder and submits once::

    with tape:                                       # one Tape, reused step after step (its arrays too)
        loss = objective(tape, step)                 # forward calls: modules, losses, simulator steps, ...
    tape.backward(loss)                              # every call's backward, in reverse; dLoss/dparam accumulate
    optimizer.step(tape.encoder)                     # updates, and zeroes every gradient (zero-on-step)
    tape.submit()
    scheduler.step()                                 # host-side learning-rate change for the next step

``Trainer(model, loss_fn, optimizer, sampler)`` is the supervised objective (:class:`SupervisedObjective`:
sample a batch on the GPU, ``model(inputs)``, ``loss_fn(pred, targets)``); ``Trainer(objective=fn,
optimizer=opt)`` takes any other, e.g. a physics fit::

    def objective(tape, step):
        state = sim.initial_state()
        for t in range(T):
            state = sim.step(state)
        return MSELoss()(state.x, observed)

The loss is a sopt loss value, a float32 array (its sum is minimised), or a list of those (their sum). Only on
metrics steps (see :mod:`sopt.train.callback`) does the host wait for the GPU: it reads the loss (and whatever
the step put in ``tape.metrics``), stops on a non-finite one, and runs the callbacks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import math
import time
from typing import Any, Iterable

import numpy as np
import slangpy as spy

from sopt.train import checkpoint
from sopt.runtime import cuda_graph
from sopt.runtime import device
from sopt.nn.module import Module
from sopt.autodiff.parameter import parameters_of
from sopt.autodiff.tape import Tape, loss_scalar
from sopt.train.callback import Callback
from sopt.train.checkpointing import Checkpoint
from sopt.train.progress import TrainingRate, training_bar
from sopt.utils.validation import check_bool, check_int


class NonFiniteError(FloatingPointError):
    """Training stopped because the loss (or a parameter) became NaN or Inf.

    Attributes: ``step`` (steps completed when it was seen), ``last_checkpoint`` ((path, step) of the last
    checkpoint written from finite parameters, or None).
    """

    def __init__(self, message: str, step: int, last_checkpoint: tuple[str, int] | None) -> None:
        super().__init__(message)
        self.step = step
        self.last_checkpoint = last_checkpoint


@dataclasses.dataclass
class TrainResult:
    """What ``fit`` did: ``steps`` completed in total, why it ended, the metrics of every metrics step."""

    steps: int
    stop_reason: str
    history: list[dict[str, Any]]

    @property
    def metrics(self) -> dict[str, Any]:
        """The metrics of the last metrics step ({} when none was read)."""
        return self.history[-1] if self.history else {}


def _require(obj: Any, name: str, methods: Iterable[str], what: str) -> None:
    missing = [m for m in methods if not callable(getattr(obj, m, None))]
    if missing:
        raise ValueError(f"{name} must be {what}; {type(obj).__name__} has no callable {', '.join(missing)}")


def _step_takes_metric(scheduler: Any) -> bool:
    """Whether ``scheduler.step`` needs an argument (a metric, as ReduceLROnPlateau's does)."""
    try:
        params = inspect.signature(scheduler.step).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


class _MetricScheduler(Callback):
    """Steps a scheduler that needs a metric, after evaluation and early stopping, before checkpoints (so a
    checkpoint holds the scheduler state of its step)."""

    order = 65

    def __init__(self, scheduler: Any, metric: str) -> None:
        super().__init__(None)
        self.scheduler, self.metric = scheduler, metric

    def on_metrics(self, trainer: "Trainer", metrics: dict[str, Any]) -> None:
        if metrics.get(self.metric) is not None:
            self.scheduler.step(metrics[self.metric])


def _check_batch_tensor(value: Any, name: str) -> spy.Tensor:
    if not isinstance(value, spy.Tensor):
        raise ValueError(f"the sampler's batch {name} must be a slangpy.Tensor of float32, got {type(value).__name__}")
    if value.dtype.name != "float":
        raise ValueError(f"the sampler's batch {name} must be a float32 tensor, got a tensor of {value.dtype.name}")
    return value


class SupervisedObjective:
    """The supervised step as an objective: ``loss_fn(model(inputs), targets)`` on ``sampler.sample(step)``.

    ``model``: a Module (called on the tape); ``loss_fn(pred, target) -> value``; ``sampler.sample(step,
    encoder) -> (inputs, targets)`` (float32 tensors; the batch of step s is the same in a resumed run).
    """

    def __init__(self, model: Any, loss_fn: Any, sampler: Any) -> None:
        _require(model, "model", ("forward", "backward", "parameters"),
                 "a Module: forward(x, encoder) -> y, backward(x, y, encoder), parameters()")
        if not callable(model):
            raise ValueError(f"model must be callable as model(x) (a sopt.nn Module), got {type(model).__name__}")
        if not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable as loss_fn(pred, target, encoder), got {type(loss_fn).__name__}")
        _require(sampler, "sampler", ("sample",), "a sampler with sample(step, encoder) -> (inputs, targets)")
        self.model, self.loss_fn, self.sampler = model, loss_fn, sampler
        self._batch_checked = False

    def __call__(self, tape: Tape, step: int) -> Any:
        batch = self.sampler.sample(step, tape.encoder)
        try:
            inputs, targets = batch
        except (TypeError, ValueError):
            raise ValueError(f"sampler.sample must return a pair (inputs, targets), got {type(batch).__name__}") from None
        if not self._batch_checked:
            _check_batch_tensor(inputs, "inputs")
            _check_batch_tensor(targets, "targets")
            self._batch_checked = True
        # a sopt Module records itself; any other object with the Module contract is recorded the same way
        pred = self.model(inputs) if isinstance(self.model, Module) else Module.tape_forward(self.model, tape, inputs)
        value = self.loss_fn(pred, targets, tape.encoder)
        if not tape.is_seed(value):   # a loss of the plain contract: it wrote dLoss/dpred in the encoder
            tape.seed_loss(value, pred)
        return value


def _metric_value(value: Any) -> Any:
    """A ``tape.metrics`` entry as a JSON-friendly value (arrays read from the GPU)."""
    if isinstance(value, spy.Tensor):
        value = value.to_numpy()
    if isinstance(value, np.ndarray):
        return float(value) if value.size == 1 else [float(v) for v in value.ravel()]
    if hasattr(value, "item") and callable(value.item):
        return float(value.item())
    return value


class Trainer:
    """Minimises an objective with ``optimizer``: ``Trainer(model, loss_fn, optimizer, sampler)`` (supervised) or
    ``Trainer(objective=fn, optimizer=opt)`` (any objective(tape, step) -> loss; see the module docstring).

    Args:
        model: a Module (``model(x)`` on the tape, ``parameters()``); with ``loss_fn`` and ``sampler``.
        loss_fn: ``loss_fn(y, target) -> value``; writes dLoss/dy into ``y.grad``; ``value.item()``.
        optimizer: a :class:`sopt.optim.Optimizer` (``step(encoder)``, zeroing gradients as it steps).
        sampler: ``sample(step, encoder) -> (inputs, targets)``, float32 tensors; e.g. a BatchSampler.
        objective: instead of model/loss_fn/sampler, ``objective(tape, step) -> loss`` (a sopt loss value, a
            float32 array whose sum is the loss, or a list of those).
        parameters: what checkpoints save and :meth:`restore` loads (a Module, Parameters, or a name ->
            Parameter dict); default the model, or for an objective the optimiser's parameters.
        scheduler: optional learning-rate scheduler, ``step()`` called after every optimiser step; one whose
            ``step`` takes a metric (ReduceLROnPlateau) is stepped on metrics steps with
            ``metrics[scheduler_metric]`` instead (its patience then counts metrics steps).
        scheduler_metric: the metric given to such a scheduler ("loss", or an Evaluate metric).
        callbacks: :class:`~sopt.train.Callback` instances (Evaluate, JSONLLogger, EarlyStopping, Checkpoint).
        log_every: steps between loss reads (each read waits for the GPU); also the progress-bar update rate.
        progress: show a tqdm bar with the loss, the evaluation metrics and steps/s; its rate and ETA leave out
            steps that compiled kernels (:mod:`sopt.train.progress`), whose notices print above it.
        data_parallel: this process's part of a data-parallel run (:class:`sopt.distributed.DataParallel`), or
            None: it splits the sampler's batch over the processes now, averages the gradients between the
            backward and the optimiser step, makes a stop from outside happen after the same step everywhere,
            and logs the loss averaged over the processes.
        cuda_graph: on the CUDA device, capture the training step into a CUDA graph (:mod:`sopt.runtime.cuda_graph`)
            once and replay it between metrics steps, two steps per launch: the host then costs one launch per
            two steps instead of ~10 dispatches per step, which is what limits small batches. The first five
            steps of a run record as usual (the capture checks that two steps repeat); a step that cannot be
            replayed raises CaptureError there. A scheduler still steps after every step: the optimiser's
            hyperparameters of the two steps are written before each launch (``Optimizer.hyper_inputs``).
            ValueError with ``data_parallel`` (its all-reduce runs on the host); on Vulkan steps are recorded
            as without it.

    ``step`` counts completed steps; the batch of step ``s`` (0-based) is ``sampler.sample(s)``, so a run
    resumed from a checkpoint (:meth:`restore`) draws the same batches as one that never stopped.
    """

    def __init__(self, model: Any = None, loss_fn: Any = None, optimizer: Any = None, sampler: Any = None, *,
                 objective: Any = None, parameters: Any = None, scheduler: Any = None,
                 scheduler_metric: str = "loss", callbacks: Iterable[Callback] = (), log_every: int = 100,
                 progress: bool = True, data_parallel: Any = None, cuda_graph: bool = False) -> None:
        if objective is not None:
            given = [n for n, v in (("model", model), ("loss_fn", loss_fn), ("sampler", sampler)) if v is not None]
            if given:
                raise ValueError(f"Trainer: give either objective= or model, loss_fn and sampler, not both (got "
                                 f"objective and {', '.join(given)})")
            if not callable(objective):
                raise ValueError(f"objective must be callable as objective(tape, step) -> loss, got "
                                 f"{type(objective).__name__}")
        else:
            if model is None or loss_fn is None or sampler is None:
                raise ValueError("Trainer needs model, loss_fn, optimizer and sampler (supervised), or "
                                 "objective=fn(tape, step) -> loss and optimizer=")
            objective = SupervisedObjective(model, loss_fn, sampler)
        _require(optimizer, "optimizer", ("step",), "an optimiser with step(encoder)")
        if parameters is None:
            parameters = model if model is not None else [p for g in getattr(optimizer, "param_groups", [])
                                                            for p in g["params"]]
        elif model is None:
            parameters_of(parameters)   # checked now: ValueError for anything that is not Parameters
        if scheduler is not None:
            _require(scheduler, "scheduler", ("step",), "a learning-rate scheduler with step()")
        if not isinstance(scheduler_metric, str) or not scheduler_metric:
            raise ValueError(f"scheduler_metric must be a metric name such as 'loss', got {scheduler_metric!r}")
        log_every = check_int(log_every, "log_every", low=1)
        progress = check_bool(progress, "progress")
        cuda_graph = check_bool(cuda_graph, "cuda_graph")
        if cuda_graph and data_parallel is not None:
            raise ValueError("cuda_graph=True cannot replay data_parallel's all-reduce (it runs on the host every "
                             "step); leave cuda_graph off with data_parallel")
        callbacks = list(callbacks)
        for i, cb in enumerate(callbacks):
            if not isinstance(cb, Callback):
                raise ValueError(f"callbacks[{i}] must be a sopt.train.Callback, got {type(cb).__name__}")
        self.model, self.loss_fn, self.optimizer, self.sampler = model, loss_fn, optimizer, sampler
        self.objective, self.parameters = objective, parameters
        self.tape = Tape()
        self.scheduler = scheduler
        self._scheduler_on_metrics = scheduler is not None and _step_takes_metric(scheduler)
        if self._scheduler_on_metrics:
            callbacks.append(_MetricScheduler(scheduler, scheduler_metric))
        self.callbacks = sorted(callbacks, key=lambda cb: cb.order)  # stable: ties keep the given order
        self.log_every = log_every
        self.progress = progress
        self.step = 0
        self.last_checkpoint: tuple[str, int] | None = None  # set by the Checkpoint callback
        self._stop_reason: str | None = None
        self._stop_asked: str | None = None   # a stop from outside, applied when a step completes
        self._last_finite: tuple[int, float] | None = None
        self.data_parallel = data_parallel
        self.cuda_graph = cuda_graph
        self._graph: Any = None        # the captured period (sopt.runtime.cuda_graph.CudaGraph), made by train_steps
        self._graph_loss: Any = None   # the loss value of its last step (reads the latest replay's loss)
        self._recorded = 0             # train_step calls so far (the capture waits for the first one's one-off work)
        self._graph_phase: tuple[int, ...] = ()   # _phase() at the capture: replays need the same (train_steps)
        self._recorded_in = -1         # the graph generation (sopt.runtime.device) the last recorded step completed in
        if data_parallel is not None:
            data_parallel.split(self)

    # -- one step ---------------------------------------------------------------------------------------------
    def train_step(self) -> Any:
        """Record one step (objective, backward, optimiser step) into one command buffer and submit it;
        returns the loss (not read).

        Nothing is submitted before the whole step is recorded, so an objective that fails (a sampler
        returning the wrong kind of batch, a bad shape) raises before the GPU runs anything of this step.
        """
        tape = self.tape
        self._recorded += 1
        self._recorded_in = -1   # set at the end: a step that replaces buffers (an arena that grows) does not count
        with tape:
            loss = self.objective(tape, self.step)
        tape.backward(loss)
        if self.data_parallel is not None:   # every process's gradients, averaged, before the same step
            self.data_parallel.reduce_gradients(tape, self.optimizer)
        self.optimizer.step(tape.encoder)
        tape.submit()
        self._recorded_in = device.graph_generation()
        self._step_scheduler()
        self.step += 1
        return loss

    def train_steps(self, n: int) -> Any:
        """Run ``n`` steps; returns the last one's loss (not read). Without ``cuda_graph`` (or off CUDA) this is
        ``n`` calls of :meth:`train_step`; with it, whole periods of the captured graph replay (captured on the
        first call that has room for it, after one recorded step: 4 steps), and the rest record as usual."""
        n = check_int(n, "n", low=0)
        loss = None
        changed = getattr(self.optimizer, "settings_changed", None)
        if self._graph is not None and (not self._graph.valid or (changed is not None and changed())):
            # its buffers were replaced, or the optimiser's settings that pick its kernels changed (learning rates
            # are written before each replay): capture again after a recorded step has uploaded the new ones
            self._graph.release()
            self._graph = None
            self._recorded_in = -1
        if self.cuda_graph and n and cuda_graph.is_supported():
            if self._graph is None and self._recorded_in != device.graph_generation() and n >= 5:
                # a first step, or the first after buffers were replaced (an optimiser's load_state_dict), does
                # one-off work (the optimiser's layout upload, the sampler's counter): not in the checked periods
                loss = self.train_step()
                n -= 1
            if self._graph is None and self._recorded_in == device.graph_generation() and n >= 4:
                losses: list[Any] = []

                def step() -> None:
                    losses.append(self.train_step())

                self._graph_phase = self._phase()
                self._graph = cuda_graph.capture(step, calls=2)
                self._graph_loss, loss = losses[-1], losses[-1]
                n -= 4
            if self._graph is not None and n > self._graph.calls and self._phase() != self._graph_phase:
                # the arena's sides, the optimiser's and the sampler's counter words alternate with every recorded
                # step: an odd number of them since the capture would make a replay read the wrong ones
                loss = self.train_step()
                n -= 1
                if self._phase() != self._graph_phase:   # one of them moved on its own (a draw outside a step)
                    self._graph.release()
                    self._graph = None
            if self._graph is not None and self._phase() == self._graph_phase:
                while n >= self._graph.calls and self._stop_asked is None:
                    # the learning rates of the replayed steps (a scheduler stepped after each, as train_step does)
                    inputs = (self.optimizer.hyper_inputs(self._graph.calls, lambda j: self._step_scheduler())
                              if hasattr(self.optimizer, "hyper_inputs") else ())
                    self._graph.replay(inputs=inputs)
                    self.step += self._graph.calls
                    n -= self._graph.calls
                    loss = self._graph_loss
        for _ in range(n):
            if self.cuda_graph and self._stop_asked is not None:   # fit ends the run at this step
                break
            loss = self.train_step()
        return loss

    def _step_scheduler(self) -> None:
        """After a step: a scheduler stepped every step takes its step (one stepped on metrics waits for them)."""
        if self.scheduler is not None and not self._scheduler_on_metrics:
            self.scheduler.step()

    def _phase(self) -> tuple[int, ...]:
        """What alternates with every recorded step: a replay must start where the capture started."""
        arena = getattr(self.optimizer, "arena", None)
        return (self._recorded % 2, getattr(self.optimizer, "phase", 0), getattr(arena, "side", 0),
                getattr(self.sampler, "phase", 0))

    def stop(self, reason: str, *, from_outside: bool = False) -> None:
        """Ask ``fit`` to end after the current step (EarlyStopping): that step becomes a metrics step whose
        callbacks all run (a Checkpoint writes), and ``fit`` returns with ``stop_reason`` = ``reason``.

        ``from_outside``: the request comes at any moment (a signal handler), so it takes effect when the step
        being run completes -- or, when it comes while a step's callbacks run, the next one: a stop that landed
        after that step's Checkpoint was skipped would end the run at a step with no checkpoint."""
        if from_outside:
            self._stop_asked = str(reason)
        else:
            self._stop_reason = str(reason)

    # -- the loop ---------------------------------------------------------------------------------------------
    def _steps_to_metrics(self, steps: int) -> int:
        """Steps from here to the next metrics step of a run of ``steps`` steps, that one included (a stop asked
        from outside ends the run at a step in between, so it is looked for only at these)."""
        periods = [self.log_every] + [cb.every for cb in self.callbacks if cb.every is not None]
        nxt = min([steps] + [(self.step // p + 1) * p for p in periods])
        return max(1, nxt - self.step)

    def is_metrics_step(self, step: int, final: bool = False) -> bool:
        """Whether ``fit`` reads metrics (and runs callbacks) after ``step`` steps of a run that is not asked to
        stop: every ``log_every`` steps, every ``every`` steps of a callback, and the ``final`` step. (A stop
        makes its step a metrics step too; a resumed run asks this to tell such a step from the others.)"""
        return final or step % self.log_every == 0 or any(cb.every is not None and step % cb.every == 0
                                                           for cb in self.callbacks)

    def nonfinite_error(self, what: str) -> NonFiniteError:
        """The NonFiniteError that stops training because of ``what`` (raised by the Trainer and by callbacks that
        find a non-finite value): the message says where the loss was last finite and which checkpoint is kept."""
        if self._last_finite is not None:
            k, value = self._last_finite
            history = f"; the loss was last read finite ({value:.6g}) at step {k}, so it diverged in steps {k + 1}..{self.step}"
        else:
            history = ""
        if self.last_checkpoint is not None:
            keep = f"The last good checkpoint, {self.last_checkpoint[0]!r} from step {self.last_checkpoint[1]}, is kept."
        elif savers := [cb for cb in self.callbacks if isinstance(cb, Checkpoint)]:
            keep = (f"No checkpoint had been written yet: the run diverged before step {savers[0].every}, where "
                    f"the Checkpoint callback would have written {savers[0].path!r} first.")
        else:
            keep = "No checkpoint had been written (add a sopt.train.Checkpoint callback to keep one)."
        return NonFiniteError(f"training stopped at step {self.step}: {what}{history}. {keep} Lower the learning "
                              "rate, clip gradients (max_grad_norm) or check the data and the model.",
                              self.step, self.last_checkpoint)

    def _read_metrics(self, loss_value: Any, since: tuple[int, float], start: float) -> dict[str, Any]:
        loss = loss_scalar(loss_value)  # waits for the GPU
        if self.data_parallel is not None:   # the whole batch's loss (the mean of the processes' equal parts)
            loss = self.data_parallel.mean(loss)
        now = time.perf_counter()
        if not math.isfinite(loss):
            raise self.nonfinite_error(f"the loss is {loss}")
        self._last_finite = (self.step, loss)
        metrics: dict[str, Any] = {"step": self.step, "loss": loss}
        for name, value in self.tape.metrics.items():   # e.g. a rollout's gradient norms
            if callable(value) and not hasattr(value, "item"):   # read only now, on a metrics step
                value = value()
            if isinstance(value, dict):
                metrics.update((k, _metric_value(v)) for k, v in value.items())
            else:
                metrics[name] = _metric_value(value)
        groups = getattr(self.optimizer, "param_groups", None)
        if groups:
            metrics["lr"] = float(groups[0]["lr"])
        if callable(getattr(self.optimizer, "poll_skipped", None)):
            metrics["skipped_steps"] = int(self.optimizer.poll_skipped())
        # an in-place step (double_buffer=False) cannot undo a non-finite result; the loss would show it a
        # metrics step later, or never after the last step
        spoiled = int(getattr(self.optimizer, "nonfinite_results", 0))
        if spoiled:
            raise self.nonfinite_error(f"{spoiled} optimiser step(s) wrote NaN or Inf into the parameters or optimiser state")
        steps, t0 = since
        metrics["steps_per_s"] = (self.step - steps) / max(now - t0, 1e-9)
        metrics["time_s"] = now - start
        return metrics

    def fit(self, steps: int) -> TrainResult:
        """Train until ``step == steps`` (a total, so a restored run continues to the same end).

        Returns a TrainResult; raises NonFiniteError (after the callbacks' ``on_train_end``) when the loss or a
        checkpointed parameter became non-finite, leaving the last good checkpoint in place.
        """
        steps = check_int(steps, "steps", low=0)
        self._stop_reason = self._stop_asked = None
        history: list[dict[str, Any]] = []
        # The optimiser would otherwise wait for the GPU every poll_every steps to count skipped steps; the
        # Trainer reads that count on its own metrics steps instead.
        saved_poll = getattr(self.optimizer, "poll_every", None)
        if saved_poll is not None:
            self.optimizer.poll_every = 0
        # the bar's rate and ETA leave out steps that compiled kernels (minutes on a first run); the notices of
        # those compiles are printed above the bar rather than through it. Without a bar, tqdm is never imported.
        rate = TrainingRate()
        bar = training_bar(steps, min(self.step, steps), rate, shown=self.progress)
        notices = contextlib.ExitStack()
        start = time.perf_counter()
        since = (self.step, start)
        error: NonFiniteError | None = None
        if self.data_parallel is not None:
            self.data_parallel.start_training(self)
        for cb in self.callbacks:
            cb.on_train_start(self)
        waited = False   # whether the last metrics step waited for the GPU (the interval rate.tick measures)
        try:
            notices.enter_context(bar.redirect_logging(logging.getLogger("sopt")))
            while self.step < steps:
                before = self.step
                loss_value = self.train_steps(self._steps_to_metrics(steps)
                                              if self.cuda_graph and cuda_graph.is_supported() else 1)
                ran = self.step - before
                # the previous step's metrics read and callbacks, and these steps: a compile leaves them out
                rate.tick(ran, synced=waited)
                waited = False
                bar.update(ran)
                if self.data_parallel is not None:   # every process stops after the same step
                    agreed = self.data_parallel.agree_stop(self._stop_asked)
                    if agreed is not None:
                        self._stop_reason, self._stop_asked = agreed, None
                elif self._stop_asked is not None:
                    self._stop_reason, self._stop_asked = self._stop_asked, None
                # a stop asked between metrics steps (a signal handler's) ends the run here, with its metrics
                # step: every callback (the checkpoint too) sees the last completed step
                final = self.step == steps or self._stop_reason is not None
                if not self.is_metrics_step(self.step, final):
                    continue
                metrics = self._read_metrics(loss_value, since, start)
                waited = True
                since = (self.step, time.perf_counter())
                for cb in self.callbacks:
                    if final or self._stop_reason is not None or cb.due(self.step):
                        cb.on_metrics(self, metrics)
                history.append(metrics)
                bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items()
                                 if k not in ("step", "lr", "steps_per_s", "time_s", "skipped_steps")
                                 and isinstance(v, float)}, refresh=False)
                if self._stop_reason is not None:
                    break
            if self.data_parallel is not None:   # every process ended after the same step; none left waiting
                self.data_parallel.end_training()
        except NonFiniteError as exc:
            error = exc
        finally:
            notices.close()
            bar.close()
            if saved_poll is not None:
                self.optimizer.poll_every = saved_poll
        if error is not None:
            reason = f"non-finite: {error}"
        else:
            reason = self._stop_reason or "completed"
        result = TrainResult(steps=self.step, stop_reason=reason, history=history)
        for cb in self.callbacks:
            cb.on_train_end(self, result)
        if error is not None:
            raise error
        return result

    # -- resuming ---------------------------------------------------------------------------------------------
    def restore(self, path: str, steps: int | None = None) -> dict[str, Any]:
        """Load a checkpoint written by :class:`~sopt.train.Checkpoint` into the model, optimiser and scheduler
        and continue from its step; returns the checkpoint's ``extra`` (``step``, ``metrics``).

        A checkpoint whose ``extra`` lacks a count of completed steps (an int >= 0; at most ``steps``, the run's
        total, when given) raises :class:`~sopt.train.checkpoint.CheckpointError` with nothing changed, as any other
        bad checkpoint does.
        """
        if steps is not None:
            steps = check_int(steps, "steps", low=0)

        def check_extra(extra: Any) -> None:
            if not isinstance(extra, dict) or "step" not in extra:
                raise ValueError("it was not written by sopt.train.Checkpoint (no 'step' in extra)")
            step = extra["step"]
            if (not isinstance(step, int) or isinstance(step, bool) or step < 0
                    or (steps is not None and step > steps)):
                allowed = f"an int in [0, {steps}]" if steps is not None else "an int >= 0"
                raise ValueError(f"its extra 'step' is {step!r}; the count of completed steps must be {allowed}")

        extra = checkpoint.load(path, parameters=self.parameters, optimizer=self.optimizer, scheduler=self.scheduler,
                                check_extra=check_extra)
        self.step = extra["step"]
        self.last_checkpoint = (str(path), self.step)
        return extra

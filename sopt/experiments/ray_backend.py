"""``sopt sweep --backend ray``: the same trials run through Ray Tune, on a local Ray instance or a cluster.

A local Ray instance (no ``--address``) listens on 127.0.0.1 only and has no dashboard (:func:`init_ray`): Ray's
default would take work from anyone who can reach the machine.

Each trial that needs work (the same choice as the local executor: pending, interrupted, running, failed with
``--retry-failed``) becomes one Tune trial of a function trainable (:func:`run_trial`) asking for
``{"cpu": 1, "gpu": gpu_per_trial}`` (fractions share a GPU; Ray sets CUDA_VISIBLE_DEVICES). The trainable runs
the trial's ``sopt run``/``sopt resume`` process with its run directory in the sweep directory, reads the metric
from metrics.jsonl as it grows and reports each record with ``tune.report({"step": step, METRIC: value})``.
``--prune halving`` uses Tune's ``ASHAScheduler`` (time attribute "step", grace period ``min_steps``, reduction
factor ``eta``) and ``--prune median`` Tune's ``MedianStoppingRule``; the trials they stop are recorded as
"pruned". Results go to the same sweep.json and trial directories as the local backend, so ``sopt report`` and
the summary table are the same. Tune's own files go to ``SWEEP_DIR/ray/``.

When Tune stops a trial (pruning, or Ctrl-C on the sweep), the trainable's cleanup sends the trial process SIGTERM
and waits: the trial finishes its step, writes its checkpoint and exits "interrupted", like a local trial. On a
cluster of several machines the config file and the sweep directory must be on a shared filesystem, with sopt
installed on every node.
Ray is imported only here, so sopt works without it.
"""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any, Callable

from sopt.utils.atomic_write import open_append
from sopt.compat import ray as compat_ray
from sopt.experiments.metric_curve import MetricCurve
from sopt.experiments.sweep_dir import SweepDir, read_summary, start_action, trial_outcome

POLL_S = 0.2
SETTLE_S = 120.0      # how long to wait for stopped trials to write their checkpoint and final summary.json

_TRIAL_PROCESSES: list[subprocess.Popen] = []     # in a Ray worker: the trial process this actor runs


def _stop_trial_processes(timeout_s: float = SETTLE_S) -> None:
    """SIGTERM to this worker's running trial process, then wait for it to checkpoint and exit (SIGKILL after
    ``timeout_s``)."""
    for process in _TRIAL_PROCESSES:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in _TRIAL_PROCESSES:
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _TRIAL_PROCESSES.clear()


class StopTrialOnCleanup:
    """Mixin of :func:`run_trial`'s Tune trainable: when Tune stops the trial (its scheduler prunes it, or the sweep
    is interrupted) the trial process gets SIGTERM and writes its checkpoint before the Ray worker exits (Ray kills
    a dead worker's child processes with SIGKILL)."""

    def cleanup(self) -> None:
        _stop_trial_processes()
        super().cleanup()


def run_trial(config: dict[str, Any], specs: dict[str, dict[str, Any]]) -> None:
    """Tune function trainable: runs the trial ``config["trial"]`` of ``specs`` (argv, run directory, log files,
    metric, mode, the driver's Python) and reports its metric records until the process exits."""
    report = _tune_report()
    spec = specs[config["trial"]]
    argv = list(spec["argv"])
    if argv[0] == spec["driver_python"]:      # the driver's interpreter path may not exist on a worker node
        argv[0] = sys.executable
    curve = MetricCurve(pathlib.Path(spec["run_dir"]) / "metrics.jsonl", spec["metric"], spec["mode"])
    curve.read()                              # a resumed trial's earlier records were reported before
    with open_append(spec["stdout"]) as out, open_append(spec["stderr"]) as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    _TRIAL_PROCESSES.append(process)
    try:
        while True:
            exited = process.poll() is not None
            for step, value in curve.read():
                report({"step": step, spec["metric"]: value})   # returns when Tune wants more
            if exited:
                return
            time.sleep(POLL_S)
    finally:                                  # ended early (an error, or Tune stopped it): stop the process too
        _stop_trial_processes()


run_trial.__mixins__ = (StopTrialOnCleanup,)   # Tune's wrap_function puts these before FunctionTrainable


def _tune_report() -> Callable[[dict], None]:
    """Tune's report function: ``ray.tune.report`` since Tune and Train split their APIs (Ray 2.41),
    ``ray.train.report`` before (Ray 2.7 to 2.40)."""
    try:
        from ray.tune.trainable.trainable_fn_utils import report
    except ImportError:
        from ray.train import report
    return report


def _run_config_class() -> type:
    """``ray.tune.RunConfig`` (Ray >= 2.41), ``ray.train.RunConfig`` before."""
    try:
        from ray.tune import RunConfig
    except ImportError:
        from ray.train import RunConfig
    return RunConfig


def _recording(scheduler_cls: type, stopped: set[str]) -> type:
    """``scheduler_cls`` that adds the sweep ids of the trials it stops to ``stopped``."""
    from ray.tune.schedulers import TrialScheduler

    class Recording(scheduler_cls):
        def on_trial_result(self, tune_controller, trial, result):
            action = super().on_trial_result(tune_controller, trial, result)
            if action == TrialScheduler.STOP:
                stopped.add(trial.config["trial"])
            return action

    Recording.__name__ = f"Recording{scheduler_cls.__name__}"
    return Recording


LOCALHOST = "127.0.0.1"


class RayBindError(RuntimeError):
    """The local Ray instance listens on another address than localhost (a Ray that ignores the request)."""


def init_ray(address: str | None, num_cpus: int | None = None) -> None:
    """``ray.init``: joins the cluster at ``address``, or (None) starts a local Ray instance with ``num_cpus`` CPUs
    (None: all) that only this machine can reach: its node, GCS and workers on 127.0.0.1, no dashboard. Ray's own
    default listens on every interface, so anyone on the network could submit work to it. RayBindError when the
    local instance listens elsewhere anyway (it is shut down first)."""
    import ray
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address:
        ray.init(address=address, **quiet)
        return
    with compat_ray.clusters_off():   # else Ray turns a loopback _node_ip_address into a routable one
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address=LOCALHOST, **quiet)
    where = sorted({node.get("NodeManagerAddress") for node in ray.nodes()} - {LOCALHOST})
    if where:
        ray.shutdown()
        raise RayBindError(f"the local Ray instance listens on {', '.join(map(str, where))}, not only on "
                           f"{LOCALHOST} (this Ray ignores the request); start Ray yourself and pass --address")


def _settle(sweep: SweepDir, ids: list[str], timeout_s: float) -> None:
    """Waits (up to ``timeout_s``) until the trials ``ids`` no longer say "running" in their summary.json: a trial
    Tune stopped is still writing its checkpoint when Tune returns."""
    deadline = time.monotonic() + timeout_s
    by_id = {t.id: t for t in sweep.trials}
    while time.monotonic() < deadline:
        if all((read_summary(sweep.trial_dir(by_id[i])) or {}).get("status") != "running" for i in ids):
            return
        time.sleep(POLL_S)


def run_with_ray(sweep: SweepDir, trial_command: Callable, config: str, *, jobs: int | None, address: str | None,
                 gpu_per_trial: float, prune: str | None, min_steps: int | None, eta: int, metric: str, mode: str,
                 retry_failed: bool, log: Callable[[str], None] = print) -> bool:
    """Runs the trials of ``sweep`` that need it through Ray Tune (see the module docstring) and records their
    outcomes in sweep.json. Connects to ``address`` (or starts a local Ray instance with ``jobs`` CPUs, default
    all) unless Ray is already initialised; ``jobs`` also caps the trials at once. Returns whether the sweep was
    interrupted (trials left to run)."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")     # with verbose=0: no boxes of Tune's progress output
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule

    todo = []
    for trial in sweep.trials:
        if trial.status in ("finished", "pruned") or (trial.status == "failed" and not retry_failed):
            continue
        action = start_action(sweep, trial, retry_failed)
        if action is not None:
            todo.append((trial, action))
        elif trial.status == "running":           # its process, left by a killed sweep, still runs
            log(f"{trial.id} {trial.error}")
    sweep.save()
    if not todo:
        return False

    started_ray = False
    if not ray.is_initialized():
        init_ray(address, jobs)
        started_ray = True
    log(f"ray: {len(todo)} trials on {ray.cluster_resources().get('CPU', 0):g} CPUs, "
        f"{ray.cluster_resources().get('GPU', 0):g} GPUs ({gpu_per_trial:g} GPU per trial)")

    specs = {}
    for trial, action in todo:
        out_log, err_log = sweep.log_paths(trial)
        argv = trial_command(action, sweep.trial_dir(trial), config, [*sweep.header["overrides"], *trial.overrides])
        specs[trial.id] = {"argv": argv, "driver_python": sys.executable, "run_dir": str(sweep.trial_dir(trial)),
                           "stdout": str(out_log), "stderr": str(err_log), "metric": metric, "mode": mode}
        trial.status, trial.error = "running", None
        log(f"{trial.id} {'resumed' if action == 'resume' else 'queued'}: {' '.join(trial.overrides)}")
    sweep.save()

    stopped: set[str] = set()
    scheduler = None
    if prune == "halving":
        scheduler = _recording(ASHAScheduler, stopped)(time_attr="step", max_t=2**31, grace_period=min_steps,
                                                        reduction_factor=eta)
    elif prune == "median":
        scheduler = _recording(MedianStoppingRule, stopped)(time_attr="step", grace_period=min_steps,
                                                            min_samples_required=2)
    trainable = tune.with_resources(tune.with_parameters(run_trial, specs=specs),
                                    {"cpu": 1, "gpu": gpu_per_trial})
    tuner = tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search([trial.id for trial, _ in todo])},
        tune_config=tune.TuneConfig(metric=metric, mode=mode, scheduler=scheduler, max_concurrent_trials=jobs,
                                    reuse_actors=False),
        run_config=_run_config_class()(name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=str((sweep.path / "ray").resolve()), verbose=0),
    )
    # Tune ends a run gracefully on SIGINT (stopping its trials); make SIGTERM do the same.
    previous = signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    errors: dict[str, str] = {}
    try:
        results = tuner.fit()
        for result in results:
            if result.error is not None and result.config:
                errors[result.config["trial"]] = str(result.error).strip().splitlines()[-1]
    finally:
        signal.signal(signal.SIGTERM, previous)
        if started_ray:
            ray.shutdown()

    _settle(sweep, [trial.id for trial, _ in todo], SETTLE_S)
    interrupted = False
    for trial, _ in todo:
        run_dir = sweep.trial_dir(trial)
        summary = read_summary(run_dir)
        if summary is None and trial.id not in errors:     # Tune never started it (the run was interrupted)
            trial.status = "pending" if not run_dir.exists() else "interrupted"
            interrupted = True
            continue
        status, error, metrics = trial_outcome(run_dir, sweep.log_paths(trial)[1], None,
                                               "prune" if trial.id in stopped else None)
        if status == "failed" and trial.id in errors and summary is None:
            error = errors[trial.id]
        trial.status, trial.error, trial.metrics = status, error, metrics
        interrupted = interrupted or status == "interrupted"
        value = metrics.get(metric)
        shown = f" {metric} {value:.6g}" if isinstance(value, (int, float)) else ""
        log(f"{trial.id} {status}{shown}" + (f": {error}" if error else ""))
    sweep.save()
    return interrupted

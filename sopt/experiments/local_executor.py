"""Runs sweep trials as processes on this machine: ``--jobs`` at once, GPUs assigned per trial, pruning, signals.

Each trial is one process (``sopt run ... --out TRIAL_DIR`` or ``sopt resume TRIAL_DIR``, see
:func:`sopt.experiments.sweep.sopt_trial_command`) in a session of its own, so a Ctrl-C in the terminal reaches the
sweep only, which forwards one SIGTERM to each running trial: the trial finishes its step, writes a checkpoint and
exits as "interrupted", and the next sweep resumes it (a second Ctrl-C forwards SIGINT, which ends a trial at once;
it resumes from its last checkpoint). With ``gpus``, each trial gets ``CUDA_VISIBLE_DEVICES`` set
to one of them, round robin over the GPUs with a free slot (``trials_per_gpu`` slots each). The pruner reads every
running trial's metrics.jsonl each poll and stops the trials it condemns with SIGTERM (status "pruned").

No trial outlives its sweep unsupervised: on Linux each trial asks the kernel for SIGTERM when the sweep process
dies (``prctl(PR_SET_PDEATHSIG)``), so a ``kill -9`` of the sweep (or a hang-up that kills it) makes every trial
checkpoint and end "interrupted", and the next sweep resumes it. A trial process that an earlier sweep process
left still running (it is still writing its checkpoint, or the system has no PDEATHSIG) is adopted by the next
sweep, which says so, counts it against ``--jobs``, stops it on a signal or for the pruner, and records (or, if
it ended "interrupted", resumes) it when it exits.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import pathlib
import select
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence

from sopt.utils.atomic_write import open_append
from sopt.experiments.metric_curve import MetricCurve
from sopt.experiments.prune import MedianStoppingRule, SuccessiveHalving
from sopt.experiments.run_dir import ENV_FILE, read_json
from sopt.experiments.sweep_dir import SweepDir, Trial, live_trial_pid, start_action, trial_outcome
from sopt.train.stop_signals import handling_stop_signals

TrialCommand = Callable[[str, pathlib.Path, str, Sequence[str]], list[str]]
POLL_S = 0.2
PR_SET_PDEATHSIG = 1          # linux/prctl.h


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux ``PR_SET_PDEATHSIG``; the
    child then checkpoints and ends "interrupted" like on Ctrl-C); None where the kernel has no such request.
    The parent may die between the fork and the request: the child then signals itself at once."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl     # looked up here: the child only calls it
    parent = os.getpid()

    def request() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
    return request


class AdoptedProcess:
    """A trial process that an earlier sweep process started and left running, watched by its pid (it is no child
    of this process, so its exit status is unknown: ``returncode`` stays None). On Linux a pidfd holds on to the
    process itself, so a signal never reaches another process that reuses the pid."""

    returncode = None

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):         # no pidfd (not Linux >= 5.3): the pid itself, as os.kill does
            self._fd = None
        self._exited = False

    def poll(self) -> int | None:
        """None while the process runs; 0 once it has ended (as Popen.poll, the status itself being unknown)."""
        if not self._exited:
            if self._fd is not None:
                self._exited = bool(select.select([self._fd], [], [], 0)[0])   # readable once it has exited
            else:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    self._exited = True
                except PermissionError:
                    pass
            if self._exited and self._fd is not None:
                os.close(self._fd)
                self._fd = None
        return 0 if self._exited else None

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, signum)
            else:
                os.kill(self.pid, signum)

    def wait(self) -> None:
        while self.poll() is None:
            time.sleep(POLL_S)


class GpuSlots:
    """``per_gpu`` slots on each of ``gpus`` (CUDA_VISIBLE_DEVICES values), handed out round robin."""

    def __init__(self, gpus: Sequence[str], per_gpu: int) -> None:
        if per_gpu < 1:
            raise ValueError(f"trials per GPU {per_gpu}: must be >= 1")
        self.gpus = list(gpus)
        self.per_gpu = per_gpu
        self.busy = {g: 0 for g in self.gpus}
        self._next = 0

    @property
    def capacity(self) -> int:
        return len(self.gpus) * self.per_gpu

    def take(self, gpu: str | None = None) -> str | None:
        """A slot on ``gpu`` when it is one of these with a slot free (an adopted trial's GPU), else on the next GPU
        after the last one handed out that has a free slot (None if all are full)."""
        if gpu in self.busy and self.busy[gpu] < self.per_gpu:
            self.busy[gpu] += 1
            return gpu
        for i in range(len(self.gpus)):
            gpu = self.gpus[(self._next + i) % len(self.gpus)]
            if self.busy[gpu] < self.per_gpu:
                self.busy[gpu] += 1
                self._next = (self._next + i + 1) % len(self.gpus)
                return gpu
        return None

    def give_back(self, gpu: str) -> None:
        self.busy[gpu] -= 1


@dataclasses.dataclass
class _Running:
    trial: Trial
    process: subprocess.Popen | AdoptedProcess
    gpu: str | None
    started: float
    stopped_for: str | None = None
    reason: str | None = None

    @property
    def returncode(self) -> int | None:
        """The exit status (None for an adopted process, whose status cannot be known)."""
        return None if isinstance(self.process, AdoptedProcess) else self.process.returncode


class LocalExecutor:
    """Runs a sweep's trials; see the module docstring. ``command(action, trial_dir, config, overrides)`` gives a
    trial's argv; ``log``: where progress lines go."""

    def __init__(self, sweep: SweepDir, command: TrialCommand, config: str, jobs: int,
                 gpus: Sequence[str] | None = None, trials_per_gpu: int = 1,
                 pruner: MedianStoppingRule | SuccessiveHalving | None = None, metric: str = "loss",
                 mode: str = "min", retry_failed: bool = False, log: Callable[[str], None] = print) -> None:
        if jobs < 1:
            raise ValueError(f"jobs {jobs}: must be >= 1")
        self.sweep, self.command, self.config = sweep, command, config
        self.slots = GpuSlots(gpus, trials_per_gpu) if gpus else None
        self.jobs = min(jobs, self.slots.capacity) if self.slots else jobs
        self.pruner, self.metric, self.mode = pruner, metric, mode
        self.retry_failed = retry_failed
        self.log = log
        self.interrupted = False
        self._signal: str | None = None          # the signal's name, logged by the loop (not in the handler)
        self._forwarded = False
        self._hurry = self._hurried = False
        self.curves: dict[str, MetricCurve] = {}

    # -- signals ---------------------------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame) -> None:
        # only flags: the handler may run in the middle of a log line, which it must not write into
        if not self.interrupted:
            self._signal = signal.Signals(signum).name
        elif signum == signal.SIGINT:
            self._hurry = True
        self.interrupted = True

    # -- one trial -------------------------------------------------------------------------------------------------
    def _curve(self, trial: Trial) -> MetricCurve:
        if trial.id not in self.curves:
            self.curves[trial.id] = MetricCurve(self.sweep.trial_dir(trial) / "metrics.jsonl", self.metric,
                                                self.mode)
        return self.curves[trial.id]

    def _start(self, trial: Trial, action: str) -> _Running | None:
        gpu = self.slots.take() if self.slots else None
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        run_dir = self.sweep.trial_dir(trial)
        if action == "run":
            self.curves.pop(trial.id, None)
        curve = self._curve(trial)
        curve.read()
        if isinstance(self.pruner, SuccessiveHalving):
            self.pruner.mark_decided(trial.id, curve)
        argv = self.command(action, run_dir, self.config, [*self.sweep.header["overrides"], *trial.overrides])
        out_log, err_log = self.sweep.log_paths(trial)
        with open_append(out_log) as out, open_append(err_log) as err:
            try:
                process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                           start_new_session=True, preexec_fn=die_with_parent())
            except OSError as exc:       # e.g. a missing interpreter: this trial fails, the sweep goes on
                if gpu is not None:
                    self.slots.give_back(gpu)
                trial.status, trial.error = "failed", f"could not start {argv[0]}: {exc}"
                self.sweep.save()
                self.log(f"{trial.id} failed: {trial.error}")
                return None
        running = _Running(trial, process, gpu, time.monotonic())
        trial.status, trial.error = "running", None
        try:
            self.sweep.save()
        except OSError:        # e.g. a full disk: the sweep ends, and this trial with it
            self._stop(running, "interrupt")
            process.wait()
            raise
        where = f" on GPU {gpu}" if gpu is not None else ""
        self.log(f"{trial.id} {'resumed' if action == 'resume' else 'started'}{where}: {' '.join(trial.overrides)}")
        return running

    def _adopt(self, trial: Trial, pid: int) -> _Running:
        """Watches ``trial``'s process ``pid``, left running by an earlier sweep process, as if it were started here
        (on the GPU its env.json names when that is one of ours)."""
        gpu = None
        if self.slots:
            try:
                env = read_json(self.sweep.trial_dir(trial) / ENV_FILE)
            except (OSError, ValueError):
                env = None
            gpu = self.slots.take(env.get("cuda_visible_devices") if isinstance(env, dict) else None)
        self._curve(trial).read()
        trial.status, trial.error = "running", None
        self.sweep.save()
        self.log(f"{trial.id} adopted: its process {pid}, started by an earlier sweep process, still runs; "
                 f"this sweep watches it until it ends")
        return _Running(trial, AdoptedProcess(pid), gpu, time.monotonic())

    def _finish(self, running: _Running) -> None:
        trial = running.trial
        if running.gpu is not None:
            self.slots.give_back(running.gpu)
        self._curve(trial).read()
        status, error, metrics = trial_outcome(self.sweep.trial_dir(trial), self.sweep.log_paths(trial)[1],
                                               running.returncode, running.stopped_for)
        trial.status, trial.error, trial.metrics = status, error, metrics
        self.sweep.save()
        value = metrics.get(self.metric)
        shown = f" {self.metric} {value:.6g}" if isinstance(value, (int, float)) else ""
        detail = {"failed": f": {error}", "pruned": f" ({running.reason})"}.get(status, "")
        self.log(f"{trial.id} {status}{shown} after {time.monotonic() - running.started:.1f} s{detail}")

    def _stop(self, running: _Running, why: str, reason: str | None = None) -> None:
        if running.stopped_for is None and running.process.poll() is None:
            running.stopped_for, running.reason = why, reason
            try:
                running.process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _prune(self, running: list[_Running]) -> None:
        for r in running:
            self._curve(r.trial).read()
        for r in running:
            if r.stopped_for is None:
                reason = self.pruner.should_stop(r.trial.id, self.curves)
                if reason is not None:
                    self._stop(r, "prune", reason)

    # -- the sweep -------------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """Runs every trial that needs it; returns whether the sweep was interrupted (SIGINT/SIGTERM)."""
        todo = [t for t in self.sweep.trials if t.status != "finished" and t.status != "pruned"
                and (t.status != "failed" or self.retry_failed)]
        if self.pruner is not None:
            for t in self.sweep.trials:     # the finished and stopped trials' curves count for the pruner
                self._curve(t).read()
        stop_signals = handling_stop_signals(self._on_signal)
        stop_signals.__enter__()
        running: list[_Running] = []
        try:
            for trial in list(todo):        # processes a killed sweep left running come first, beyond --jobs
                pid = live_trial_pid(self.sweep.trial_dir(trial))
                if pid is not None:
                    todo.remove(trial)
                    running.append(self._adopt(trial, pid))
            while todo or running:
                while todo and not self.interrupted and len(running) < self.jobs:
                    trial = todo.pop(0)
                    action = start_action(self.sweep, trial, self.retry_failed)
                    if action is None:
                        self.sweep.save()
                        if trial.status == "running":      # its process, left by a killed sweep, still runs
                            self.log(f"{trial.id} {trial.error}")
                        continue
                    started = self._start(trial, action)
                    if started is not None:
                        running.append(started)
                if self.interrupted:
                    todo = []
                    if not self._forwarded:
                        self._forwarded = True
                        self.log(f"{self._signal}: stopping the running trials (each writes a checkpoint; a second "
                                 f"Ctrl-C stops them at once, losing the steps since their last checkpoint)")
                        for r in running:
                            self._stop(r, "interrupt")
                    if self._hurry and not self._hurried:    # a second Ctrl-C: sopt run exits at once on it
                        self._hurried = True
                        for r in running:
                            if r.process.poll() is None:
                                r.process.send_signal(signal.SIGINT)
                if self.pruner is not None and not self.interrupted:
                    self._prune(running)
                for r in [r for r in running if r.process.poll() is not None]:
                    running.remove(r)
                    self._finish(r)
                    if (isinstance(r.process, AdoptedProcess) and r.trial.status == "interrupted"
                            and not self.interrupted):
                        todo.insert(0, r.trial)     # stopped when its sweep died: resumed by this one
                if running:
                    time.sleep(POLL_S)
        finally:
            for r in running:        # only reached by an exception in this loop: leave no orphan behind
                self._stop(r, "interrupt")
            for r in running:
                r.process.wait()
            for r in running:
                try:
                    self._finish(r)
                except OSError:      # sweep.json cannot be written: the exception on its way out says why
                    pass
            stop_signals.__exit__(None, None, None)   # last: it may hand a signal on to the program's own handler
        return self.interrupted

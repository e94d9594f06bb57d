"""Callbacks: JSONL metrics, evaluation, early stopping on a target metric, and stopping on a non-finite
loss or parameter with the last good checkpoint kept loadable."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import sopt
from sopt.data import generated_image, pixel_coordinates, psnr
from sopt.train import (BatchSampler, Callback, Checkpoint, EarlyStopping, Evaluate, JSONLLogger, NonFiniteError,
                        Trainer)
from tests.train.toy import HostMSE, PixelTable

SIZE = 8


def _setup(opt_cls: Any = sopt.optim.Adam, lr: float = 0.05, **trainer_kwargs: Any):
    x, y = pixel_coordinates(SIZE, SIZE), generated_image(SIZE).reshape(-1, 3)
    model = PixelTable(SIZE, SIZE)
    opt = opt_cls(model.parameters(), lr=lr)
    trainer = Trainer(model, HostMSE(), opt, BatchSampler(x, y, 32, seed=0), progress=False, **trainer_kwargs)
    return trainer, model, y


def _psnr(trainer: Trainer) -> dict:
    target = generated_image(SIZE).reshape(-1, 3)
    return {"psnr": psnr(np.clip(trainer.model.table.numpy(), 0, 1), target)}


def test_jsonl_log_content(tmp_path) -> None:
    path = tmp_path / "logs" / "metrics.jsonl"
    # the logger is listed first, but Evaluate's order puts it before, so logged records hold the PSNR
    trainer, _, _ = _setup(callbacks=[JSONLLogger(path), Evaluate(_psnr, every=4)], log_every=3)
    result = trainer.fit(10)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    # metrics steps: multiples of 3 (log_every) and of 4 (Evaluate), and the final step 10
    assert [r["step"] for r in records[:-1]] == [3, 4, 6, 8, 9, 10]
    for r in records[:-1]:
        assert {"step", "loss", "lr", "steps_per_s", "time_s", "skipped_steps"} <= set(r)
        assert r["lr"] == 0.05 and r["loss"] > 0 and r["skipped_steps"] == 0
        assert ("psnr" in r) == (r["step"] in (4, 8, 10))   # evaluated before the logger wrote
    assert records[-1] == {"step": 10, "event": "end", "reason": "completed"}
    assert result.history == records[:-1]
    losses = [r["loss"] for r in records[:-1]]
    assert losses[-1] < losses[0]


def test_early_stop_on_target_metric() -> None:
    trainer, _, _ = _setup(callbacks=[EarlyStopping("psnr", 30.0, mode="max"), Evaluate(_psnr, every=10)])
    result = trainer.fit(2000)
    assert result.steps < 2000 and result.steps % 10 == 0
    assert result.stop_reason.startswith("early stop: psnr")
    assert result.metrics["psnr"] >= 30.0
    assert all(m["psnr"] < 30.0 for m in result.history[:-1])


def test_early_stop_min_mode_on_loss() -> None:
    trainer, _, _ = _setup(callbacks=[EarlyStopping("loss", 1e-3, mode="min")], log_every=5)
    result = trainer.fit(2000)
    assert result.steps < 2000 and result.metrics["loss"] <= 1e-3


class _SetLR(Callback):
    """Simulates a divergence: from ``step`` on, a learning rate no update survives."""

    order = 90  # after the Checkpoint, which therefore saves the sane learning rate

    def __init__(self, step: int, lr: float) -> None:
        super().__init__(every=step)
        self.step, self.lr = step, lr

    def on_metrics(self, trainer: Trainer, metrics: dict) -> None:
        if trainer.step == self.step:
            trainer.optimizer.param_groups[0]["lr"] = self.lr


def test_nonfinite_loss_stops_with_clear_message_and_keeps_last_good_checkpoint(tmp_path) -> None:
    ckpt, log = tmp_path / "ckpt.npz", tmp_path / "log.jsonl"
    trainer, model, y = _setup(sopt.optim.SGD, lr=0.5, log_every=5,
                               callbacks=[Checkpoint(ckpt, every=10), JSONLLogger(log), _SetLR(20, 1e30)])
    with pytest.raises(NonFiniteError) as info:
        trainer.fit(100)
    message = str(info.value)
    assert "the loss is inf" in message or "the loss is nan" in message
    assert f"last good checkpoint, {str(ckpt)!r} from step 20" in message
    assert "last read finite" in message and "at step 20" in message
    assert info.value.last_checkpoint == (str(ckpt), 20) and 20 < info.value.step <= 30
    # the checkpoint is loadable into a fresh model and optimiser, finite, from step 20, with the sane lr
    fresh = PixelTable(SIZE, SIZE)
    opt = sopt.optim.SGD(fresh.parameters(), lr=0.1)
    extra = sopt.load(ckpt, parameters=fresh, optimizer=opt)
    assert extra["step"] == 20 and np.isfinite(extra["metrics"]["loss"])
    assert opt.param_groups[0]["lr"] == 0.5
    assert np.isfinite(fresh.table.numpy()).all() and psnr(fresh.table.numpy(), y) > 15.0
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["event"] == "end" and last["reason"].startswith("non-finite") and last["step"] == info.value.step


def test_divergence_before_the_first_checkpoint_says_none_was_written_yet(tmp_path) -> None:
    ckpt = tmp_path / "ckpt.npz"
    trainer, _, _ = _setup(sopt.optim.SGD, lr=0.5, log_every=5,
                           callbacks=[Checkpoint(ckpt, every=50), _SetLR(5, 1e30)])
    with pytest.raises(NonFiniteError) as info:
        trainer.fit(100)
    message = str(info.value)
    assert "No checkpoint had been written yet: the run diverged before step 50" in message
    assert repr(str(ckpt)) in message and "add a sopt.train.Checkpoint" not in message
    assert info.value.last_checkpoint is None and not ckpt.exists()


class _Poison(Callback):
    """Writes an Inf into one parameter at ``step`` after the loss was read (a corruption the loss misses)."""

    order = 65

    def __init__(self, step: int) -> None:
        super().__init__(every=step)

    def on_metrics(self, trainer: Trainer, metrics: dict) -> None:
        table = trainer.model.table
        values = table.numpy()
        values[0, 0] = np.inf
        table.values.copy_from_numpy(values)  # bypasses Parameter.load's finiteness check on purpose


def test_checkpoint_refuses_nonfinite_parameters(tmp_path) -> None:
    ckpt = tmp_path / "ckpt.npz"
    trainer, _, _ = _setup(callbacks=[Checkpoint(ckpt, every=5), _Poison(10)], log_every=100)
    with pytest.raises(NonFiniteError, match=r"parameter 'table' holds 1 non-finite value\(s\); the checkpoint "
                                             r"was not written.*from step 5"):
        trainer.fit(20)
    extra = sopt.load(ckpt, parameters=PixelTable(SIZE, SIZE))
    assert extra["step"] == 5


def test_evaluate_rejects_bad_metrics() -> None:
    trainer, _, _ = _setup(callbacks=[Evaluate(lambda t: {"loss": 1.0}, every=2)])
    with pytest.raises(ValueError, match="clashes with the Trainer's own"):
        trainer.fit(2)
    trainer, _, _ = _setup(callbacks=[Evaluate(lambda t: {"psnr": "high"}, every=2)])
    with pytest.raises(ValueError, match="must be a number, got 'high'"):
        trainer.fit(2)


def test_early_stopping_warns_when_metric_never_appears() -> None:
    trainer, _, _ = _setup(callbacks=[EarlyStopping("psnr", 30.0)], log_every=2)
    with pytest.warns(RuntimeWarning, match="'psnr', which never appeared"):
        trainer.fit(4)

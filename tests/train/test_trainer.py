"""The Trainer's step: order of the calls, one command buffer and no host wait per step, zero-on-step,
seeded reproducibility and resuming from a checkpoint."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.data import generated_image, pixel_coordinates, psnr
from sopt.optim.lr_scheduler import ReduceLROnPlateau
from sopt.train import Batch, BatchSampler, Checkpoint, Trainer
from tests.train.toy import HostLossValue, HostMSE, PixelTable

SIZE = 8


def _image_data(size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    return pixel_coordinates(size, size), generated_image(size).reshape(-1, 3)


class _Recorder:
    """Fake sampler, model, loss, optimiser and scheduler that log each call and the encoder it got."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        device = sopt.get_device()
        self.x = spy.Tensor.zeros(device, (4, 2), "float")
        self.t = spy.Tensor.zeros(device, (4, 3), "float")
        self.y = spy.Tensor.zeros(device, (4, 3), "float").with_grads(zero=True)
        self.p = sopt.Parameter([0.0])
        self.param_groups = [{"lr": 0.5}]

    # sampler
    def sample(self, step: int, encoder: Any) -> Batch:
        self.events.append(("sample", step, encoder))
        return Batch(self.x, self.t)

    # model
    def forward(self, x: Any, encoder: Any) -> Any:
        assert x is self.x
        self.events.append(("forward", encoder))
        return self.y

    def backward(self, x: Any, y: Any, encoder: Any) -> None:
        assert x.storage is self.x.storage and y is self.y   # x without a gradient buffer: the tape passes it detached
        self.events.append(("backward", encoder))

    def parameters(self) -> list:
        return [self.p]   # a model with parameters: the tape runs its backward

    # loss
    def __call__(self, pred: Any, target: Any, encoder: Any) -> Any:
        assert pred is self.y and target is self.t
        self.events.append(("loss", encoder))
        return self

    def item(self) -> float:
        self.events.append(("item",))
        return 1.0

    # optimiser / scheduler
    def step(self, encoder: Any = "scheduler") -> None:
        self.events.append(("opt.step", encoder) if encoder != "scheduler" else ("scheduler.step",))


def test_step_order_one_encoder_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _Recorder()
    real_submit = dev.submit
    monkeypatch.setattr(dev, "submit", lambda enc: (rec.events.append(("submit", enc)), real_submit(enc)))
    sched = type("Sched", (), {"step": lambda self: rec.step()})()
    trainer = Trainer(rec, rec, rec, rec, scheduler=sched, log_every=2, progress=False)
    trainer.fit(4)
    names = [e[0] for e in rec.events]
    one_step = ["sample", "forward", "loss", "backward", "opt.step", "submit", "scheduler.step"]
    assert names == one_step * 2 + ["item"] + one_step * 2 + ["item"]
    steps = [e[1] for e in rec.events if e[0] == "sample"]
    assert steps == [0, 1, 2, 3]
    # every call of a step got the same encoder, and each step its own
    encoders = [e[-1] for e in rec.events if len(e) > 1 and e[0] != "sample"] + \
               [e[2] for e in rec.events if e[0] == "sample"]
    per_step = {id(e) for e in encoders}
    assert len(per_step) == 4


def test_one_submit_per_step_and_loss_read_only_on_metrics_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _image_data()
    model = PixelTable(SIZE, SIZE)
    opt = sopt.optim.Adam(model.parameters(), lr=0.05)  # skip_nonfinite, double-buffered: the update alone
    trainer = Trainer(model, HostMSE(), opt, BatchSampler(x, y, 32, seed=0), log_every=5, progress=False)
    trainer.fit(1)  # compile everything once
    submits = []
    real_submit = dev.submit
    monkeypatch.setattr(dev, "submit", lambda enc: (submits.append(enc), real_submit(enc)))
    waits = []
    monkeypatch.setattr(dev, "synchronize", lambda: waits.append(1))
    HostLossValue.reads = 0
    before = dev.dispatch_count()
    trainer.fit(21)
    assert len(submits) == 20
    # sample + forward + loss + backward + update (which undoes itself on a non-finite step)
    assert dev.dispatch_count() - before == 20 * 5
    # metrics steps: 5, 10, 15, 20 and the final 21
    assert HostLossValue.reads == 5
    assert not waits


def test_gradients_are_zero_after_steps_and_parameters_moved() -> None:
    x, y = _image_data()
    model = PixelTable(SIZE, SIZE)
    opt = sopt.optim.SGD(model.parameters(), lr=1.0)
    Trainer(model, HostMSE(), opt, BatchSampler(x, y, 64, seed=0), log_every=1000, progress=False).fit(3)
    assert np.all(model.table.grad_numpy() == 0.0)
    assert not np.allclose(model.table.numpy(), 0.5)


def _train(seed: int, steps: int, checkpoint: str | None = None, restore: str | None = None) -> np.ndarray:
    x, y = _image_data()
    model = PixelTable(SIZE, SIZE)
    opt = sopt.optim.Adam(model.parameters(), lr=0.02)
    callbacks = [Checkpoint(checkpoint, every=10)] if checkpoint else []
    trainer = Trainer(model, HostMSE(), opt, BatchSampler(x, y, 16, seed=seed), callbacks=callbacks,
                      log_every=10, progress=False)
    if restore:
        assert trainer.restore(restore)["step"] == 10
    trainer.fit(steps)
    return model.table.numpy()


def test_seeded_runs_are_reproducible_and_resume_continues_the_same_run(tmp_path) -> None:
    a, b, c = _train(1, 20), _train(1, 20), _train(2, 20)
    # The only non-associative sums are atomic adds of duplicate rows in the backward pass.
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert np.abs(a - c).max() > 1e-3
    path = str(tmp_path / "ckpt.npz")
    _train(1, 10, checkpoint=path)
    resumed = _train(1, 20, restore=path)
    np.testing.assert_allclose(resumed, a, rtol=1e-6, atol=1e-7)


def test_pixel_table_fit_reaches_high_psnr() -> None:
    # A correct step drives each pixel to its colour; a wrong sign, scale or missing zero-on-step would not.
    size = 16
    x, y = _image_data(size)
    model = PixelTable(size, size)
    opt = sopt.optim.Adam(model.parameters(), lr=0.05)
    Trainer(model, HostMSE(), opt, BatchSampler(x, y, 256, seed=0), log_every=100, progress=False).fit(200)
    assert psnr(model.table.numpy(), y) > 35.0


def test_metric_scheduler_is_stepped_on_metrics_steps_before_checkpoints(tmp_path) -> None:
    x, y = _image_data()
    model = PixelTable(SIZE, SIZE)
    opt = sopt.optim.Adam(model.parameters(), lr=0.05)
    plateau = ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=10.0)
    ckpt = tmp_path / "ckpt.npz"
    trainer = Trainer(model, HostMSE(), opt, BatchSampler(x, y, 32, seed=0), scheduler=plateau,
                      callbacks=[Checkpoint(ckpt, every=8)], log_every=4, progress=False)
    result = trainer.fit(8)
    # threshold=10 (relative): no read counts as an improvement after the first, so each later one halves lr
    assert [m["lr"] for m in result.history] == [0.05, 0.025]
    assert opt.param_groups[0]["lr"] == 0.0125
    fresh = ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=10.0)
    sopt.load(ckpt, parameters=model, optimizer=opt, scheduler=fresh)
    assert fresh.state_dict() == plateau.state_dict()


@pytest.mark.parametrize("double_buffer", [True, False])
def test_update_that_overflows_on_the_last_step_is_reported(double_buffer: bool) -> None:
    """lr=1e40 spoils the first update. Double-buffered (the default) it is undone and counted as skipped, the
    run completes with finite parameters; in place it cannot be undone, and the Trainer stops with its
    non-finite error although the loss it read (computed before that update) was finite."""
    from sopt.train import NonFiniteError
    x, y = pixel_coordinates(4, 4), generated_image(4).reshape(-1, 3)
    model = PixelTable(4, 4)
    opt = sopt.optim.SGD(model.parameters(), lr=0.5, double_buffer=double_buffer)
    opt.param_groups[0]["lr"] = 1e40   # the constructor refuses it: float32 stores it as Inf
    trainer = Trainer(model, HostMSE(), opt, BatchSampler(x, y, 16, seed=0), progress=False)
    if double_buffer:
        with pytest.warns(RuntimeWarning, match="1 step\\(s\\) skipped"):
            result = trainer.fit(1)
        assert result.stop_reason == "completed" and result.metrics["skipped_steps"] == 1
        assert np.array_equal(model.table.numpy(), np.full((16, 3), 0.5, np.float32))
    else:
        with pytest.warns(RuntimeWarning, match="parameters now hold non-finite values"), \
                pytest.raises(NonFiniteError, match=r"training stopped at step 1: 1 optimiser step\(s\) wrote NaN or Inf"):
            trainer.fit(1)

"""Bad input is refused with a ValueError naming what was expected and what came, before any GPU work."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.data import load_image
from sopt.train import Batch, BatchSampler, Trainer
from tests.train.toy import HostMSE, PixelTable


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the device fails the test: the ValueError must come first."""
    def refuse() -> None:
        raise AssertionError("GPU work started before the input was checked")
    # sopt first: sopt.get_device resolves lazily from sopt.runtime.device, so patching that first would make the
    # patched function the value restored afterwards (every later test in the process then "started GPU work")
    monkeypatch.setattr(sopt, "get_device", refuse)
    monkeypatch.setattr(dev, "get_device", refuse)


def test_image_path_that_does_not_exist(tmp_path, no_gpu) -> None:
    missing = tmp_path / "nope.png"
    with pytest.raises(ValueError, match=rf"image path '{missing}' does not exist; expected a PNG/JPEG"):
        load_image(missing)


def test_image_path_that_is_a_folder(tmp_path, no_gpu) -> None:
    with pytest.raises(ValueError, match="is not a file; expected a PNG/JPEG"):
        load_image(tmp_path)


def test_file_that_is_not_an_image(tmp_path, no_gpu) -> None:
    fake = tmp_path / "notes.png"
    fake.write_text("this is text, not pixels")
    with pytest.raises(ValueError, match=r"notes.png' is not an image Pillow can read \(expected PNG, JPEG"):
        load_image(fake)


def test_target_array_with_nan(no_gpu) -> None:
    x = np.zeros((10, 2), np.float32)
    y = np.zeros((10, 3), np.float32)
    y[7, 1] = np.nan
    y[8, 0] = np.inf
    with pytest.raises(ValueError, match=r"targets must be finite, got 2 NaN/Inf value\(s\) in 2 row\(s\), first at row 7"):
        BatchSampler(x, y, batch_size=4)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.bool_, np.complex64])
def test_dataset_of_the_wrong_dtype(dtype, no_gpu) -> None:
    x = np.zeros((10, 2), np.float32)
    y = np.zeros((10, 3), dtype)
    with pytest.raises(ValueError, match=rf"targets must hold floating-point values \(float32; float16/float64 are "
                                         rf"converted\), got dtype {np.dtype(dtype)}"):
        BatchSampler(x, y, batch_size=4)


def test_dataset_shapes(no_gpu) -> None:
    with pytest.raises(ValueError, match=r"inputs must be a non-empty 2-D array \(n_rows, features\), got shape \(2, 2, 2\)"):
        BatchSampler(np.zeros((2, 2, 2)), np.zeros((2, 3)), batch_size=1)
    with pytest.raises(ValueError, match="same number of rows, got 5 inputs and 4 targets"):
        BatchSampler(np.zeros((5, 2)), np.zeros((4, 3)), batch_size=1)
    with pytest.raises(ValueError, match="must be a numpy array or a float32 slangpy.Tensor, got str"):
        BatchSampler("pixels", np.zeros((4, 3)), batch_size=1)


def test_dataset_tensor_of_the_wrong_dtype() -> None:
    ints = spy.Tensor.from_numpy(sopt.get_device(), np.zeros((10, 2), np.int32))
    with pytest.raises(ValueError, match="inputs must be a float32 tensor, got a tensor of int"):
        BatchSampler(ints, np.zeros((10, 3), np.float32), batch_size=4)


class _IntBatchSampler:
    """A user sampler returning an int32 input batch."""

    def __init__(self) -> None:
        device = sopt.get_device()
        self.batch = Batch(spy.Tensor.zeros(device, (4, 2), "int"), spy.Tensor.zeros(device, (4, 3), "float"))

    def sample(self, step, encoder):
        return self.batch


def test_batch_of_the_wrong_dtype_is_refused_before_the_step_is_submitted(monkeypatch: pytest.MonkeyPatch) -> None:
    submits = []
    monkeypatch.setattr(dev, "submit", lambda enc: submits.append(enc))
    model = PixelTable(2, 2)
    trainer = Trainer(model, HostMSE(), sopt.optim.SGD(model.parameters(), lr=0.1), _IntBatchSampler(),
                      progress=False)
    with pytest.raises(ValueError, match="the sampler's batch inputs must be a float32 tensor, got a tensor of int"):
        trainer.fit(1)
    assert submits == [] and trainer.step == 0


def test_trainer_arguments(no_gpu) -> None:
    loss = lambda pred, target, encoder: None  # noqa: E731
    optimizer = type("Opt", (), {"step": lambda self, encoder=None: None})()
    sampler = type("Sampler", (), {"sample": lambda self, step, encoder: None})()
    half_model = type("HalfModel", (), {"forward": lambda self, x, e: x, "parameters": lambda self: []})()
    with pytest.raises(ValueError, match="model must be a Module.*HalfModel has no callable backward"):
        Trainer(half_model, loss, optimizer, sampler)
    with pytest.raises(ValueError, match="sampler must be a sampler with sample.*list has no callable sample"):
        Trainer(PixelTable.__new__(PixelTable), loss, optimizer, [])
    with pytest.raises(ValueError, match="log_every must be >= 1, got 0"):
        Trainer(PixelTable.__new__(PixelTable), loss, optimizer, sampler, log_every=0)


def _trainer_with(**kwargs):
    loss = lambda pred, target, encoder: None  # noqa: E731
    optimizer = type("Opt", (), {"step": lambda self, encoder=None: None})()
    sampler = type("Sampler", (), {"sample": lambda self, step, encoder: None})()
    return Trainer(PixelTable.__new__(PixelTable), loss, optimizer, sampler, **kwargs)


def _sampler_with(**kwargs):
    x, y = np.zeros((4, 2), np.float32), np.zeros((4, 3), np.float32)
    return BatchSampler(**{"inputs": x, "targets": y, "batch_size": 2, **kwargs})


# every argument of the Trainer, the BatchSampler and the callbacks, given a value of the wrong type
_TRAIN_CASES = [
    (_trainer_with, "log_every", bad) for bad in ("100", True, 10.0, -1)
] + [(_trainer_with, "progress", bad) for bad in (1, "no", None)] + [
    (_trainer_with, "scheduler_metric", bad) for bad in (5, None, "")
] + [(_sampler_with, name, bad) for name in ("batch_size", "seed") for bad in ("2", True, 2.0)] + [
    (lambda **k: sopt.train.Evaluate(lambda t: {}, **k), "every", bad) for bad in ("5", True, 0)
] + [(lambda **k: sopt.train.EarlyStopping(**{"metric": "loss", "target": 1.0, **k}), name, bad)
     for name, bads in (("target", ("1.0", True, None)), ("mode", (1, None, ["max"]))) for bad in bads] + [
    (lambda **k: sopt.train.Checkpoint(**{"path": "run.ckpt", "every": 5, **k}), name, bad)
    for name, bads in (("every", ("5", True)), ("path", (5, None, ""))) for bad in bads] + [
    (lambda **k: sopt.train.JSONLLogger(**{"path": "log.jsonl", **k}), name, bad)
    for name, bads in (("every", ("5", True)), ("append", (1, "yes")), ("path", (5, None))) for bad in bads]


@pytest.mark.parametrize("make,name,bad", _TRAIN_CASES, ids=[f"{n}-{b!r}" for _, n, b in _TRAIN_CASES])
def test_training_arguments_of_the_wrong_type(make, name, bad, no_gpu) -> None:
    with pytest.raises(ValueError, match=rf"^(\w+ )?{name} must be"):
        make(**{name: bad})


def test_dataset_values_beyond_float32_are_refused(no_gpu) -> None:
    x = np.zeros((4, 2))
    x[1, 0], x[2, 1] = 1e39, -1e300
    with pytest.raises(ValueError, match=r"inputs contains 2 value\(s\) too large for float32 \(largest magnitude 1e\+300"):
        BatchSampler(x, np.zeros((4, 1)), 2)


def test_image_data_must_be_real(tmp_path, no_gpu) -> None:
    from sopt.data import psnr, save_image
    with pytest.raises(ValueError, match="image must hold real numbers, got complex"):
        save_image(tmp_path / "x.png", np.full((2, 2), 0.5 + 0.5j))
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(ValueError, match="prediction must hold real numbers"):
        psnr(np.zeros(3, np.complex128), np.zeros(3))
    with pytest.raises(ValueError, match=r"data_range must be a number, got '1'"):
        psnr(np.zeros(3), np.ones(3), data_range="1")
    with pytest.raises(ValueError, match=r"data_range must be in \(0.0, inf\), got 0"):
        psnr(np.zeros(3), np.ones(3), data_range=0)

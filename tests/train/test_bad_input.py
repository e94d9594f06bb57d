"""Bad input is refused with a ValueError naming what was expected and what came, before any GPU work."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt import device as dev
from sopt.data import load_image
from sopt.train import Batch, BatchSampler, Trainer
from tests.train.toy import HostMSE, PixelTable


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the device fails the test: the ValueError must come first."""
    def refuse() -> None:
        raise AssertionError("GPU work started before the input was checked")
    monkeypatch.setattr(dev, "get_device", refuse)
    monkeypatch.setattr(sopt, "get_device", refuse)


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

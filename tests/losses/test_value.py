"""LossValue: read on demand from a ring of result slots; a value read too late says so."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.losses import MSELoss
from sopt.losses.value import ResultRing


def test_values_stay_readable_until_their_slot_is_reused():
    loss = MSELoss()
    loss._ring = ResultRing(slots=4)
    device = sopt.get_device()
    pred = spy.Tensor.from_numpy(device, np.zeros((2, 2), np.float32)).with_grads()
    values = [loss(pred, np.full((2, 2), float(k), np.float32)) for k in range(5)]
    assert [v.item() for v in values[1:]] == [1.0, 4.0, 9.0, 16.0]
    assert float(values[4]) == 16.0
    with pytest.raises(RuntimeError, match="overwritten"):
        values[0].item()


def test_printing_a_loss_value_shows_its_number():
    """print(loss), repr and f"{loss:.4f}" show the value (before: 'LossValue(MSELoss, evaluation 0)')."""
    loss = MSELoss()
    loss._ring = ResultRing(slots=2)
    device = sopt.get_device()
    pred = spy.Tensor.from_numpy(device, np.zeros((2, 2), np.float32)).with_grads()
    value = loss(pred, np.full((2, 2), 0.5, np.float32))
    assert repr(value) == str(value) == f"{value}" == "LossValue(0.25, MSELoss)"
    assert f"{value:.3f}" == "0.250" and f"loss {value:8.2e}" == "loss 2.50e-01"
    loss(pred, np.zeros((2, 2), np.float32)), loss(pred, np.zeros((2, 2), np.float32))   # value's slot is reused
    assert repr(value).startswith("LossValue(MSELoss, evaluation 0: unreadable: ") and "overwritten" in repr(value)
    with pytest.raises(RuntimeError, match="overwritten"):
        f"{value:.3f}"

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

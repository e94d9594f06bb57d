"""Bad batches: every module rejects them with a ValueError naming what it expected and what came, before
any GPU work (the dispatch count does not move)."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.nn import MLP, FrequencyEncoding, HashGridEncoding, Linear, ReLU, Sequential
from sopt.nn.batch import BatchBuffers, CACHED_SIZES


@pytest.fixture(scope="module")
def modules() -> dict[str, sopt.nn.Module]:
    return {
        "Linear": Linear(2, 4),
        "FrequencyEncoding": FrequencyEncoding(2, 2),
        "HashGridEncoding": HashGridEncoding(2, n_levels=2, log2_table_size=4),
        "Sequential": Sequential(Linear(2, 3), ReLU()),
        "MLP": MLP(2, 1, 4, 1),
    }


NAMES = ["Linear", "FrequencyEncoding", "HashGridEncoding", "Sequential", "MLP"]


def rejected(call, *patterns: str) -> str:
    before = dev.dispatch_count()
    with pytest.raises(ValueError) as info:
        call()
    assert dev.dispatch_count() == before, "GPU work was issued before the check"
    message = str(info.value)
    for p in patterns:
        assert p in message, f"{p!r} not in {message!r}"
    return message


@pytest.mark.parametrize("name", NAMES)
def test_wrong_feature_count(modules, name):
    rejected(lambda: modules[name](np.zeros((5, 3), np.float32)), "expected 2 features", "(5, 3)")


@pytest.mark.parametrize("name", NAMES)
def test_float64_and_int_arrays(modules, name):
    rejected(lambda: modules[name](np.zeros((5, 2))), "float32", "float64", "astype(np.float32)")
    rejected(lambda: modules[name](np.zeros((5, 2), np.int32)), "float32", "int32")


@pytest.mark.parametrize("name", NAMES)
def test_tensor_of_another_dtype(modules, name):
    device = sopt.get_device()
    as_double = spy.Tensor.from_numpy(device, np.zeros((5, 2), np.float64))
    rejected(lambda: modules[name](as_double), "float32", "'double'")
    as_int = spy.Tensor.from_numpy(device, np.zeros((5, 2), np.int32))
    rejected(lambda: modules[name](as_int), "float32", "'int'")


def test_other_shapes_and_types(modules):
    lin = modules["Linear"]
    rejected(lambda: lin(np.zeros(2, np.float32)), "expected a batch of shape (N, 2)", "(2,)")
    rejected(lambda: lin(np.zeros((0, 2), np.float32)), "empty")
    rejected(lambda: lin([[1.0, 2.0]]), "slangpy.Tensor or a float32 numpy array", "list")
    relu = ReLU()
    rejected(lambda: relu(np.zeros((2, 2, 2), np.float32)), "(N, F)", "3 dimension(s)")
    rejected(lambda: relu(np.zeros((2, 0), np.float32)), "no features")


def test_backward_with_a_foreign_output(modules):
    lin = modules["Linear"]
    x = np.zeros((5, 2), np.float32)
    lin(x)
    device = sopt.get_device()
    rejected(lambda: lin.backward(x, spy.Tensor.empty(device, (5, 3), "float").with_grads()),
             "y has shape (5, 3), expected (5, 4)")
    rejected(lambda: lin.backward(x, spy.Tensor.empty(device, (5, 4), "float")), "no gradient buffer")


def test_batch_buffers_keep_recent_sizes():
    buffers = BatchBuffers()
    first = buffers.get("y", 1, 3, grads=True)
    assert buffers.get("y", 1, 3, grads=True) is first and first.grad_out is not None
    for n in range(2, CACHED_SIZES + 2):
        buffers.get("y", n, 3)
    assert buffers.get("y", 1, 3, grads=True) is not first   # the least recently used size was released

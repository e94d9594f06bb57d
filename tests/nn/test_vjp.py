"""vjp: numpy in and out, and no side effect on the parameters' gradients."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.nn import Linear, vjp


def test_gradients_of_a_training_step_survive_a_vjp():
    layer = Linear(3, 2, seed=0)
    pending = np.arange(6, dtype=np.float32).reshape(2, 3)   # as if a backward pass had accumulated these
    layer.weight.set_grad(pending)
    layer.bias.set_grad([5.0, -5.0])
    x = np.ones((4, 3))
    dy = np.ones((4, 2))
    y, dx, grads = vjp(layer, x, dy)
    np.testing.assert_array_equal(layer.weight.grad_numpy(), pending)
    np.testing.assert_array_equal(layer.bias.grad_numpy(), [5.0, -5.0])
    # the returned gradients are those of this vjp alone (zeroed first, not added to the pending ones)
    np.testing.assert_allclose(grads["weight"], np.full((2, 3), 4.0))
    np.testing.assert_allclose(grads["bias"], [4.0, 4.0])
    assert y.dtype == dx.dtype == np.float32 and y.shape == (4, 2) and dx.shape == (4, 3)
    np.testing.assert_allclose(dx, np.tile(layer.weight.numpy().sum(0), (4, 1)), rtol=1e-6)


def test_checks_shapes():
    layer = Linear(3, 2)
    with pytest.raises(ValueError, match="expects 3"):
        vjp(layer, np.ones((4, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"has shape \(4, 3\), expected \(4, 2\)"):
        vjp(layer, np.ones((4, 3)), np.ones((4, 3)))
    with pytest.raises(ValueError, match="non-finite"):
        vjp(layer, np.full((4, 3), np.nan), np.ones((4, 2)))

"""gradcheck catches wrong gradients, reports where, and restores the parameters."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.nn import GradcheckError, Linear, gradcheck


class WrongBiasGradient(Linear):
    """A Linear whose backward adds twice the bias gradient: only 'bias' is wrong."""

    def backward(self, x, y, encoder=None):
        super().backward(x, y, encoder)
        super().backward(x.detach(), y, encoder)   # weight and bias again, input gradient not rewritten
        self.weight.set_grad(self.weight.grad_numpy() / 2)


def test_passes_a_correct_module_and_restores_parameters():
    layer = Linear(4, 3, seed=1, activation="tanh")
    before = [p.numpy() for p in layer.parameters()]
    result = gradcheck(layer, np.random.default_rng(0).normal(size=(5, 4)), n_checks=5)
    assert result.ok and not result.failures
    assert result.max_abs_error < 1e-3 and result.worst is not None
    assert "passed" in str(result) and "worst" in str(result)
    for p, v in zip(layer.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), v)


def test_reports_a_wrong_parameter_gradient():
    layer = WrongBiasGradient(4, 3, seed=1, activation="tanh")
    x = np.random.default_rng(0).normal(size=(5, 4))
    result = gradcheck(layer, x, n_checks=5)
    assert not result.ok
    assert {e.where.split("[")[0] for e in result.failures} == {"param 'bias'"}
    assert result.worst.where.startswith("param 'bias'")
    assert result.worst.analytic == pytest.approx(2 * result.worst.numeric, rel=1e-2)
    assert result.max_rel_error == pytest.approx(0.5, abs=0.01)
    assert "FAILED" in str(result) and "param 'bias'" in str(result)
    with pytest.raises(GradcheckError, match="param 'bias'") as info:
        gradcheck(layer, x, n_checks=5, raise_on_fail=True)
    assert info.value.result.ok is False


def test_input_only_and_parameters_only():
    layer = Linear(2, 2, seed=0)
    x = np.ones((3, 2))
    assert all(e.where.startswith("input") for e in gradcheck(layer, x, check_params=False).entries)
    assert all(e.where.startswith("param") for e in gradcheck(layer, x, check_inputs=False).entries)
    with pytest.raises(ValueError, match="eps"):
        gradcheck(layer, x, eps=0.0)

"""Regression losses: values and the gradients written into pred.grad against numpy (torch semantics),
one dispatch per evaluation, and bad input rejected before any GPU work."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.losses import HuberLoss, L1Loss, MSELoss, RelativeL2Loss
from sopt.losses.regression import MAX_GROUPS, THREADS


def reference(name: str, p: np.ndarray, t: np.ndarray) -> tuple[float, np.ndarray]:
    """(mean loss, dLoss/dpred) in float64, as torch.nn.functional with reduction='mean'."""
    p, t = p.astype(np.float64), t.astype(np.float64)
    d = p - t
    n = d.size
    if name == "mse":
        return float(np.mean(d * d)), 2 * d / n
    if name == "l1":
        return float(np.mean(np.abs(d))), np.sign(d) / n
    if name == "huber":   # delta = 0.5
        a = np.abs(d)
        return float(np.mean(np.where(a < 0.5, 0.5 * d * d, 0.5 * (a - 0.25)))), np.clip(d, -0.5, 0.5) / n
    if name == "relative_l2":   # eps = 0.01, denominator held constant
        den = p * p + 0.01
        return float(np.mean(d * d / den)), 2 * d / den / n
    raise ValueError(name)


@pytest.fixture(scope="module")
def losses():
    return {"mse": MSELoss(), "l1": L1Loss(), "huber": HuberLoss(delta=0.5), "relative_l2": RelativeL2Loss(eps=0.01)}


SHAPES = [(5, 3), (64, 7), (THREADS * MAX_GROUPS + 1001, 1)]   # one group, several, every group looping


@pytest.mark.parametrize("shape", SHAPES, ids=["one-group", "groups", "grid-stride"])
@pytest.mark.parametrize("name", ["mse", "l1", "huber", "relative_l2"])
def test_value_and_gradient_match_numpy(losses, name, shape):
    rng = np.random.default_rng(len(shape) + shape[0])
    p = rng.normal(size=shape).astype(np.float32)
    t = rng.normal(size=shape).astype(np.float32)
    t.ravel()[:3] = p.ravel()[:3]   # d = 0: L1's sign(0) = 0, Huber's quadratic branch
    value, grad = losses[name].value_and_grad(p, t)
    ref_value, ref_grad = reference(name, p, t)
    assert value == pytest.approx(ref_value, rel=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6 * np.abs(ref_grad).max())


@pytest.mark.parametrize("name", ["mse", "l1", "huber"])
def test_seeded_gradient_is_the_derivative_of_the_value(losses, name):
    # central differences of the GPU loss value itself, at elements away from L1's and Huber's kinks
    # (RelativeL2's gradient holds its denominator constant by design, so it is not the full derivative)
    rng = np.random.default_rng(11)
    p = rng.uniform(-2, 2, size=(6, 4)).astype(np.float32)
    t = (p + rng.choice([-1.0, 1.0], size=p.shape) * rng.uniform(0.1, 0.4, size=p.shape)).astype(np.float32)
    t[0, :2] = p[0, :2] + np.float32(1.5)   # Huber's linear branch (|d| > delta = 0.5)
    _, grad = losses[name].value_and_grad(p, t)
    eps = 1e-2
    for index in [(0, 0), (0, 1), (2, 3), (5, 2)]:
        plus, minus = p.copy(), p.copy()
        plus[index] += eps
        minus[index] -= eps
        h = np.float64(plus[index]) - np.float64(minus[index])
        numeric = (losses[name].value_and_grad(plus, t)[0] - losses[name].value_and_grad(minus, t)[0]) / h
        assert grad[index] == pytest.approx(numeric, rel=2e-3, abs=1e-5), index


def test_gradient_overwrites_and_value_waits_until_read(losses):
    device = sopt.get_device()
    p = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    t = np.zeros((4, 3), np.float32)
    pred = spy.Tensor.from_numpy(device, p).with_grads()
    pred.grad.copy_from_numpy(np.full((4, 3), 123.0, np.float32))
    target = spy.Tensor.from_numpy(device, t)
    encoder = device.create_command_encoder()
    before = dev.dispatch_count()
    value = losses["mse"](pred, target, encoder)
    assert dev.dispatch_count() == before + 1
    dev.submit(encoder)
    assert value.item() == pytest.approx(float(np.mean(p.astype(np.float64) ** 2)), rel=1e-6)
    np.testing.assert_allclose(pred.grad.to_numpy(), 2 * p / 12, rtol=1e-6)   # 123 is gone, not added to


def test_values_are_deterministic_and_independent(losses):
    rng = np.random.default_rng(0)
    p = rng.normal(size=(50_000, 3)).astype(np.float32)
    pred = spy.Tensor.from_numpy(sopt.get_device(), p).with_grads()
    t1, t2 = rng.normal(size=p.shape).astype(np.float32), np.zeros(p.shape, np.float32)
    v1, v2, v3 = losses["l1"](pred, t1), losses["l1"](pred, t2), losses["l1"](pred, t1)
    assert v1.item() == v3.item()   # same sum order
    assert v2.item() == pytest.approx(float(np.mean(np.abs(p.astype(np.float64)))), rel=1e-5)


def test_two_evaluations_recorded_into_one_encoder(losses):
    device = sopt.get_device()
    p1, p2 = np.full((3, 2), 1.0, np.float32), np.full((5, 1), -2.0, np.float32)
    pred1 = spy.Tensor.from_numpy(device, p1).with_grads()
    pred2 = spy.Tensor.from_numpy(device, p2).with_grads()
    target1 = spy.Tensor.from_numpy(device, np.zeros((3, 2), np.float32))
    target2 = spy.Tensor.from_numpy(device, np.ones((5, 1), np.float32))
    encoder = device.create_command_encoder()
    v1 = losses["mse"](pred1, target1, encoder)
    v2 = losses["mse"](pred2, target2, encoder)
    dev.submit(encoder)
    assert (v1.item(), v2.item()) == (1.0, 9.0)
    np.testing.assert_allclose(pred1.grad.to_numpy(), np.full((3, 2), 2.0 / 6), rtol=1e-6)
    np.testing.assert_allclose(pred2.grad.to_numpy(), np.full((5, 1), -6.0 / 5), rtol=1e-6)
    # the same pair again writes only the slot (its sizes and buffers are bound); a change of pair rebinds them all
    encoder = device.create_command_encoder()
    values = [losses["mse"](pred2, target2, encoder), losses["mse"](pred1, target1, encoder),
              losses["mse"](pred1, target1, encoder), losses["mse"](pred2, target2, encoder)]
    dev.submit(encoder)
    assert [v.item() for v in values] == [9.0, 1.0, 1.0, 9.0]


def test_nonfinite_device_target_is_reported_on_read(losses):
    device = sopt.get_device()
    pred = spy.Tensor.from_numpy(device, np.zeros((3, 2), np.float32)).with_grads()
    t = np.zeros((3, 2), np.float32)
    t[1, 0], t[2, 1] = np.nan, np.inf
    value = losses["mse"](pred, spy.Tensor.from_numpy(device, t))
    with pytest.raises(ValueError, match="2 non-finite"):
        value.item()


def rejected(call, *patterns: str) -> None:
    before = dev.dispatch_count()
    with pytest.raises(ValueError) as info:
        call()
    assert dev.dispatch_count() == before, "GPU work was issued before the check"
    for p in patterns:
        assert p in str(info.value), f"{p!r} not in {str(info.value)!r}"


def test_bad_input_is_rejected_before_gpu_work(losses):
    device = sopt.get_device()
    loss = losses["huber"]
    pred = spy.Tensor.from_numpy(device, np.zeros((4, 3), np.float32)).with_grads()
    nan_target = np.zeros((4, 3), np.float32)
    nan_target[2, 1] = np.nan
    rejected(lambda: loss(pred, nan_target), "HuberLoss", "1 non-finite", "(2, 1)")
    rejected(lambda: loss(pred, np.zeros((4, 2), np.float32)), "shape (4, 2), expected (4, 3)")
    rejected(lambda: loss(pred, np.zeros((4, 3))), "float32", "float64")
    rejected(lambda: loss(pred, spy.Tensor.from_numpy(device, np.zeros((3, 4), np.float32))), "expected (4, 3)")
    rejected(lambda: loss(pred, spy.Tensor.from_numpy(device, np.zeros((4, 3), np.int32))), "'int'")
    rejected(lambda: loss(pred.detach(), np.zeros((4, 3), np.float32)), "no gradient buffer")
    rejected(lambda: loss(np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)), "slangpy.Tensor")
    with pytest.raises(ValueError, match="delta"):
        HuberLoss(delta=-1.0)
    with pytest.raises(ValueError, match="eps"):
        RelativeL2Loss(eps=0.0)


@pytest.mark.parametrize("make,name", [
    (lambda v: HuberLoss(delta=v), "HuberLoss delta"),
    (lambda v: RelativeL2Loss(eps=v), "RelativeL2Loss eps"),
])
@pytest.mark.parametrize("bad", ["0.5", True, None, 1 + 0j])
def test_loss_parameters_of_the_wrong_type(make, name, bad):
    with pytest.raises(ValueError, match=rf"^{name} must be a number, got {bad!r}".replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        make(bad)

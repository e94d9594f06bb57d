"""sopt.autodiff.grad_max: a hash grid summing in float16 or fixed point takes M = max |dL/dy| from the module that writes
dL/dy (TensorCoreMLP on CUDA, tested in test_tensor_core_mlp.py) and skips its pass 1. Here the writer is simulated on
any backend: it claims the request, writes dL/dy and raises the slot to M's bits itself."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

from sopt.runtime import device as dev
from sopt.autodiff import grad_max
from sopt.nn import HashGridEncoding
from sopt.nn.batch import write_batch
from sopt.optim import Adam

CONFIG = dict(in_dims=2, n_levels=3, n_features=2, log2_table_size=6, base_resolution=3, per_level_scale=2.0)


def test_requests_are_claimed_once_and_bounded():
    device = dev.get_device()
    a, b = (spy.Tensor.zeros(device, (8, 2), "float") for _ in range(2))
    calls = []
    grad_max.request(a, lambda encoder: calls.append("a") or (a.storage, 4))
    assert grad_max.claim(b, None) is None   # nobody asked for b
    assert grad_max.claim(a, None) == (a.storage, 4) and calls == ["a"]
    assert grad_max.claim(a, None) is None   # used up
    many = [spy.Tensor.zeros(device, (1,), "float") for _ in range(grad_max.MAX_REQUESTS + 1)]
    for t in many:
        grad_max.request(t, lambda encoder: (t.storage, 0))
    assert grad_max.claim(many[0], None) is None and grad_max.claim(many[-1], None) is not None


def _writer_step(enc: HashGridEncoding, x: np.ndarray, dy: np.ndarray, claims: bool) -> int:
    """Forward, then dL/dy written as a module after the grid would: with ``claims`` it claims the grid's request
    and raises the M slot to max |dy|'s bits in the same command buffer. Returns the dispatches of the claim and
    the backward."""
    y = enc(x)
    device = dev.get_device()
    encoder = device.create_command_encoder()
    before = dev.dispatch_count()   # from the claim, which may convert an earlier call's pending sums
    slot = grad_max.claim(y.grad, encoder) if claims else None
    assert (slot is not None) == claims
    write_batch(y.grad, dy)
    if slot is not None:
        m = np.abs(dy).max().astype(np.float32).view(np.uint32)
        encoder.upload_buffer_data(slot[0], slot[1], np.array([m], np.uint32))
    enc.backward(x, y, encoder)
    dispatches = dev.dispatch_count() - before
    dev.submit(encoder)
    return dispatches


@pytest.mark.parametrize("mode", ["float16", "deterministic"])
def test_given_max_skips_pass_1_and_gives_the_same_table_gradient(mode):
    # one sample per backward: each entry's terms come from one thread, so the sums are the same bits both ways.
    # Two backward calls before the step: the second claim converts the first call's pending float16 sums
    # (their conversion clears the slot the second call uses) before the writer raises it
    kw = {"deterministic": True} if mode == "deterministic" else {"gradient_precision": "float16"}
    rng = np.random.default_rng(3)
    data = [(rng.uniform(0, 1, (1, 2)).astype(np.float32), rng.normal(size=(1, 6)).astype(np.float32) * 0.1)
            for _ in range(4)]
    results = []
    for claims in (True, False):
        enc = HashGridEncoding(**CONFIG, seed=1, **kw)
        enc.table.load(np.random.default_rng(7).normal(size=enc.table.shape))
        opt = Adam([enc.table], lr=1e-2)
        counts = []
        for k in range(0, len(data), 2):
            for x, dy in data[k:k + 2]:
                counts.append(_writer_step(enc, x, dy, claims))
            grad = enc.table.grad_numpy()   # converts pending sums (a flush)
            opt.step()
        results.append((counts, grad, enc.table.numpy()))
    (c_given, g_given, v_given), (c_pass, g_pass, v_pass) = results
    assert all(a == b - 1 for a, b in zip(c_given, c_pass))   # pass 1 skipped every time
    np.testing.assert_array_equal(g_given, g_pass)
    np.testing.assert_array_equal(v_given, v_pass)
    assert np.abs(g_pass).max() > 0


def test_a_gradient_added_to_after_its_writer_raised_the_max_gets_pass_1():
    # a Tape adds a second consumer's dL/dy into a gradient its first consumer wrote (and raised M for): M no longer
    # covers it, so the grid runs its own pass 1
    enc = HashGridEncoding(**CONFIG, seed=1, gradient_precision="float16")
    rng = np.random.default_rng(8)
    x = rng.uniform(0, 1, (20, 2)).astype(np.float32)
    dy = rng.normal(size=(20, 6)).astype(np.float32)
    counts = []
    for touch in (False, True):
        y = enc(x)
        encoder = dev.get_device().create_command_encoder()
        before = dev.dispatch_count()
        slot = grad_max.claim(y.grad, encoder)
        write_batch(y.grad, dy)
        encoder.upload_buffer_data(slot[0], slot[1], np.array([np.abs(dy).max().view(np.uint32)], np.uint32))
        if touch:
            grad_max.touched(y.grad)
        enc.backward(x, y, encoder)
        counts.append(dev.dispatch_count() - before)
        dev.submit(encoder)
    assert counts[1] == counts[0] + 1


def test_the_tape_reports_a_second_consumer_of_a_gradient(monkeypatch):
    # an encoding's output read by two modules on a Tape: the second one's dL/dy is added into the gradient the
    # first wrote, which the tape reports to grad_max
    from sopt import Tape
    from sopt.losses import MSELoss
    from sopt.nn import Linear

    enc = HashGridEncoding(**CONFIG, seed=1, gradient_precision="float16")
    heads = [Linear(enc.out_features, 2, seed=k) for k in range(2)]
    touched = []
    monkeypatch.setattr(grad_max, "touched", lambda grad: touched.append(grad_max.key(grad)))
    x = np.random.default_rng(1).uniform(0, 1, (16, 2)).astype(np.float32)
    with Tape() as tape:
        y = enc(x)
        loss = MSELoss()(heads[0](y), np.zeros((16, 2), np.float32))
        loss2 = MSELoss()(heads[1](y), np.ones((16, 2), np.float32))
    tape.backward([loss, loss2])
    assert grad_max.key(y.grad) in touched

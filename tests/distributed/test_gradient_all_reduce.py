"""GradientAllReduce (sopt.distributed.gradient_all_reduce) in one process: what goes into the average."""

from __future__ import annotations

import numpy as np
import pytest


def test_gradient_all_reduce_averages_pending_float16_sums(monkeypatch) -> None:
    # a float16 hash grid leaves its table's sums pending for Adam to fold (sopt.autodiff.grad_source); the all-reduce
    # must average them too: it converts them into the arena's gradient block before reading it
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from sopt.runtime import device as dev
    from sopt.distributed.gradient_all_reduce import GradientAllReduce
    from sopt.nn import HashGridEncoding
    from sopt.optim import Adam

    enc = HashGridEncoding(2, n_levels=3, log2_table_size=6, base_resolution=3, gradient_precision="float16")
    opt = Adam(enc.parameters(), lr=1e-2)
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (200, 2)).astype(np.float32)
    tape = SimpleNamespace(encoder=dev.get_device().create_command_encoder())
    y = enc(x)
    y.grad.copy_from_numpy(rng.normal(size=(200, enc.out_features)).astype(np.float32))
    enc.backward(x, y, tape.encoder)
    assert enc.table.pending_grad is not None
    seen = {}
    reduce = GradientAllReduce(2, deterministic=False, on_gpu=False)
    monkeypatch.setattr(reduce, "_reduce_on_host", lambda grads: seen.setdefault("block", grads.copy()))
    reduce(tape, opt)
    dev.submit(tape.encoder)
    assert enc.table.pending_grad is None
    table = enc.table.grad_numpy().ravel()
    assert np.abs(table).max() > 0
    np.testing.assert_array_equal(seen["block"][:table.size], table)   # the table's gradient starts the block

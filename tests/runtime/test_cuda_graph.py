"""sopt.runtime.cuda_graph: replayed training steps equal recorded ones; a call that does not repeat is refused.

The capture runs on the CUDA device only (SOPT_DEVICE=cuda on the GPU machine); on Vulkan these check that the
Trainer option falls back to recording every step and that capture says why it cannot run.
"""

from __future__ import annotations

import numpy as np
import pytest

from sopt.runtime import cuda_graph
from sopt.runtime import device as dev
from sopt.losses import MSELoss
from sopt.nn import HashGridEncoding, Sequential
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.optim import Adam
from sopt.train import BatchSampler, Trainer

on_cuda = pytest.mark.skipif(not cuda_graph.is_supported(), reason="CUDA graphs need SOPT_DEVICE=cuda")


def _trainer(cuda_graph_on: bool, log_every: int = 10**9) -> Trainer:
    rng = np.random.default_rng(3)
    x = rng.random((512, 2), dtype=np.float32)
    y = np.stack([np.sin(6 * x[:, 0]), np.cos(5 * x[:, 1]), x[:, 0] * x[:, 1]], 1).astype(np.float32)
    enc = HashGridEncoding(2, n_levels=4, n_features=2, log2_table_size=10, base_resolution=4, per_level_scale=1.5,
                           seed=1, deterministic=True)
    net = FullyFusedMLP(enc.out_features, 3, 16, 1, activation="relu", seed=1, deterministic=True)
    model = Sequential(enc, net)
    return Trainer(model, MSELoss(), Adam(model.parameters(), lr=1e-2), BatchSampler(x, y, batch_size=64, seed=5),
                   progress=False, log_every=log_every, cuda_graph=cuda_graph_on)


def _state(trainer: Trainer) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in trainer.model.state_dict().items()}


def test_train_steps_with_cuda_graph_matches_recorded_steps() -> None:
    """11 steps: on CUDA 4 captured + 3 replays of 2 + 1 recorded; bit for bit the same as 11 recorded steps
    (deterministic sums), the same loss, and the optimiser counts every step (Adam's bias correction)."""
    plain, graphed = _trainer(False), _trainer(True)
    plain_loss = plain.train_steps(11)
    loss = graphed.train_steps(11)
    assert graphed.step == plain.step == 11
    assert graphed.optimizer.step_count == 11
    a, b = _state(plain), _state(graphed)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert loss.item() == plain_loss.item()
    # a step recorded after replays draws the batch of its step (the sampler's counter moved on the GPU); replays
    # after an odd number of recorded steps start on the sides and counter words those left
    assert graphed.train_step().item() == plain.train_step().item()
    assert graphed.train_steps(5).item() == plain.train_steps(5).item()
    a, b = _state(plain), _state(graphed)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert graphed.optimizer.step_count == 17
    if cuda_graph.is_supported():
        assert graphed._graph is not None and graphed._graph.calls == 2


@on_cuda
def test_fit_with_cuda_graph_logs_the_same_losses() -> None:
    plain, graphed = _trainer(False, log_every=5), _trainer(True, log_every=5)
    h1, h2 = plain.fit(23).history, graphed.fit(23).history
    assert [m["step"] for m in h1] == [m["step"] for m in h2] == [5, 10, 15, 20, 23]
    np.testing.assert_array_equal([m["loss"] for m in h1], [m["loss"] for m in h2])
    assert graphed._graph is not None and graphed._graph.replays > 0


@on_cuda
def test_a_call_that_changes_its_arguments_is_refused_after_running() -> None:
    """A scalar that changes every call would be replayed stale: CaptureError names it; both periods ran."""
    from sopt.optim.optimizer import Optimizer  # noqa: F401  (the fill kernel below is the optimiser's)
    trainer = _trainer(False)
    opt = trainer.optimizer
    values = iter(range(1, 100))
    n = opt.arena.n_vec

    def fill() -> None:
        enc = dev.create_command_encoder()
        opt._kernel("fill").set(arena=opt.arena.buffer, fill_first=0, fill_count=n,
                                fill_value=float(next(values))).dispatch(n, enc)
        dev.submit(enc)

    with pytest.raises(cuda_graph.CaptureError, match="fill_value: 1.0 the first time, 2.0 the second"):
        cuda_graph.capture(fill, calls=1)
    dev.synchronize()
    grads = opt.arena.grads.to_numpy()[:4 * n]
    assert np.all(grads == 2.0)   # the captured call ran once, after the checked one


@on_cuda
def test_a_graph_whose_buffers_were_replaced_is_captured_again() -> None:
    """load_state_dict rewrites the optimiser's control words: the old graph refuses to launch, the Trainer captures
    a new one, and training still matches recorded steps bit for bit."""
    plain, graphed = _trainer(False), _trainer(True)
    plain.train_steps(9)
    graphed.train_steps(9)
    old = graphed._graph
    state = graphed.optimizer.state_dict()
    graphed.optimizer.load_state_dict(state)
    plain.optimizer.load_state_dict(plain.optimizer.state_dict())
    assert not old.valid
    with pytest.raises(RuntimeError, match="load_state_dict"):
        old.replay()
    plain.train_steps(10)
    graphed.train_steps(10)
    assert graphed._graph is not old and graphed._graph.valid
    a, b = _state(plain), _state(graphed)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@on_cuda
def test_a_learning_rate_changed_between_replays_reaches_the_replays() -> None:
    """A learning rate set on the host (a scheduler stepped on metrics) is written before the next replay (the
    optimiser's hyperparameter rows are graph inputs): training matches recorded steps bit for bit."""
    plain, graphed = _trainer(False), _trainer(True)
    plain.train_steps(9)
    graphed.train_steps(9)
    old = graphed._graph
    for t in (plain, graphed):
        for g in t.optimizer.param_groups:
            g["lr"] = 3e-3
    plain.train_steps(10)
    graphed.train_steps(10)
    assert graphed._graph is old and old.replays >= 4   # the lr is an input: no capture again
    a, b = _state(plain), _state(graphed)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.skipif(cuda_graph.is_supported(), reason="the Vulkan message")
def test_capture_off_cuda_says_why() -> None:
    with pytest.raises(RuntimeError, match="CUDA graphs need sopt's CUDA device"):
        cuda_graph.capture(lambda: None)


def test_trainer_cuda_graph_refuses_data_parallel() -> None:
    t = _trainer(False)
    with pytest.raises(ValueError, match="cuda_graph=True cannot replay data_parallel"):
        Trainer(t.model, MSELoss(), t.optimizer, t.sampler, data_parallel=object(), cuda_graph=True)


def test_a_scheduled_learning_rate_trains_the_same_with_cuda_graph() -> None:
    """A warm-up then cosine schedule, stepped after every step: replayed steps get their own learning rates,
    written before each launch, and train bit for bit as recorded ones (on Vulkan both record every step)."""
    from sopt.optim.lr_scheduler import WarmupCosineLR
    runs = []
    for graph in (False, True):
        t = _trainer(graph)
        t.scheduler = WarmupCosineLR(t.optimizer, warmup_steps=5, total_steps=30)
        t.train_steps(21)
        runs.append((t, _state(t), t.optimizer.param_groups[0]["lr"]))
    (plain, a, lr_a), (graphed, b, lr_b) = runs
    assert lr_a == lr_b and graphed.step == 21
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    if cuda_graph.is_supported():
        assert graphed._graph is not None and graphed._graph.replays >= 7

"""One name per parameter (issue 38 item 6): the same user code run on MLP, FullyFusedMLP (and on CUDA
TensorCoreMLP) of the same widths gives the same parameter names and shapes in named_parameters, state_dict, vjp,
gradcheck, optimiser groups and state, and checkpoints, and the same numbers given the same weights; checkpoints
of one class load into the other, and checkpoints written when FullyFusedMLP named its one flat ``params`` still
load."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.autodiff.parameter_window import ParameterWindow
from sopt.losses import MSELoss
from sopt.nn import MLP, FullyFusedMLP, FrequencyEncoding, Sequential, gradcheck, vjp
from sopt.optim import Adam

IN, OUT, HIDDEN, LAYERS = 3, 2, 16, 2   # 3 inputs: FullyFusedMLP's first-layer rows are padded to 4
NAMES = ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
SHAPES = [(16, 3), (16,), (16, 16), (16,), (2, 16), (2,)]
KINDS = ["MLP", "FullyFusedMLP", pytest.param("TensorCoreMLP", marks=pytest.mark.skipif(
    "dev.device_kind() != 'cuda'", reason="TensorCoreMLP runs on CUDA only"))]


def build(kind: str, seed: int = 0):
    if kind == "MLP":
        return MLP(IN, OUT, HIDDEN, LAYERS, activation="tanh", seed=seed)
    if kind == "FullyFusedMLP":
        return FullyFusedMLP(IN, OUT, HIDDEN, LAYERS, activation="tanh", seed=seed)
    from sopt.nn.tensor_core_mlp import TensorCoreMLP
    return TensorCoreMLP(IN, OUT, HIDDEN, LAYERS, activation="tanh", seed=seed)


def batch(n: int = 40, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (n, IN)).astype(np.float32), rng.uniform(-1, 1, (n, OUT)).astype(np.float32))


def tolerance(kind: str) -> float:
    return 5e-3 if kind == "TensorCoreMLP" else 1e-5   # half-precision products against float32


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(float(np.abs(b).max()), 1e-30))


def train_step(module, opt: Adam, x: np.ndarray, target: np.ndarray) -> None:
    """One tape step: MSE loss, backward, the optimiser's step."""
    tape = sopt.Tape()
    xt = spy.Tensor.from_numpy(sopt.get_device(), x)
    with tape:
        loss = MSELoss()(module(xt), target)
    tape.backward(loss)
    opt.step(tape.encoder)
    tape.submit()


@pytest.mark.parametrize("kind", KINDS)
def test_names_and_shapes_are_the_same_everywhere(kind: str) -> None:
    m = build(kind)
    named = list(m.named_parameters())
    assert [k for k, _ in named] == NAMES
    assert [p.shape for _, p in named] == SHAPES
    assert [p.name for _, p in named] == ["weight", "bias"] * 3   # a Linear's Parameter names
    assert m.parameters() == [p for _, p in named]
    assert [(k, v.shape) for k, v in m.state_dict().items()] == list(zip(NAMES, SHAPES))
    for (k, p), v in zip(named, m.state_dict().values()):
        np.testing.assert_array_equal(p.numpy(), v, err_msg=k)
    opt = Adam(m.parameters(), lr=0.01)
    assert [p.name for p in opt.param_groups[0]["params"]] == ["weight", "bias"] * 3
    state = opt.state_dict()["state"]
    assert [state[i]["exp_avg"].shape for i in range(6)] == SHAPES


@pytest.mark.parametrize("kind", KINDS[1:])
def test_vjp_and_gradcheck_match_mlp_per_layer(kind: str) -> None:
    mlp, other = build("MLP", seed=1), build(kind, seed=2)
    other.load_state_dict(mlp.state_dict())
    x, dy = batch()
    y, dx, grads = vjp(mlp, x, dy)
    y2, dx2, grads2 = vjp(other, x, dy)
    assert list(grads2) == list(grads) == NAMES
    assert rel(y2, y) < tolerance(kind) and rel(dx2, dx) < tolerance(kind)
    for key in NAMES:
        assert grads2[key].shape == grads[key].shape and rel(grads2[key], grads[key]) < tolerance(kind), key
    if kind == "TensorCoreMLP":
        return   # finite differences of a half-precision forward are too noisy to check at 1e-2
    ours, theirs = (gradcheck(m, x[:4], n_checks=2, seed=3, check_inputs=False) for m in (other, mlp))
    assert ours.ok and theirs.ok, str(ours)
    labels = [e.where.split("[")[0] for e in ours.entries]
    assert labels == [e.where.split("[")[0] for e in theirs.entries]
    assert labels == [f"param '{k}'" for k in NAMES for _ in range(2)]


@pytest.mark.parametrize("kind", KINDS[1:])
def test_training_steps_and_optimiser_state_match_mlp(kind: str) -> None:
    mlp, other = build("MLP", seed=1), build(kind, seed=2)
    other.load_state_dict(mlp.state_dict())
    x, target = batch(seed=4)
    opts = [Adam(m.parameters(), lr=0.01) for m in (mlp, other)]
    for _ in range(2):
        for m, opt in zip((mlp, other), opts):
            train_step(m, opt, x, target)
    for (key, a), (key2, b) in zip(mlp.named_parameters(), other.named_parameters(), strict=True):
        assert key == key2 and rel(b.numpy(), a.numpy()) < tolerance(kind), key
    mine, theirs = (o.state_dict() for o in opts)
    assert mine["param_groups"][0]["params"] == theirs["param_groups"][0]["params"] == list(range(6))
    state_tolerance = 2e-2 if kind == "TensorCoreMLP" else 1e-4   # squares of gradients, summed over two steps
    for i, key in enumerate(NAMES):
        for state in ("exp_avg", "exp_avg_sq"):
            assert theirs["state"][i][state].shape == mine["state"][i][state].shape
            assert rel(theirs["state"][i][state], mine["state"][i][state]) < state_tolerance, (key, state)
    # FullyFusedMLP's first-layer padding column stayed zero through the steps
    if isinstance(other, FullyFusedMLP):
        i_pad, i_log, o, off = other.layers[0]
        assert not other.params.numpy()[off:off + o * i_pad].reshape(o, i_pad)[:, i_log:].any()


@pytest.mark.parametrize("src,dst", [("MLP", "FullyFusedMLP"), ("FullyFusedMLP", "MLP")])
def test_a_checkpoint_of_one_class_loads_into_the_other(src: str, dst: str, tmp_path) -> None:
    a, b = build(src, seed=1), build(dst, seed=2)
    opt_a, opt_b = Adam(a.parameters(), lr=0.01), Adam(b.parameters(), lr=0.01)
    x, target = batch(seed=5)
    train_step(a, opt_a, x, target)
    sopt.save(tmp_path / "a.npz", a, optimizer=opt_a)
    sopt.load(tmp_path / "a.npz", b, optimizer=opt_b)
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(b.state_dict()[key], value, err_msg=key)
    sa, sb = opt_a.state_dict(), opt_b.state_dict()
    assert sb["step"] == sa["step"] == 1
    for i in range(6):
        np.testing.assert_array_equal(sb["state"][i]["exp_avg_sq"], sa["state"][i]["exp_avg_sq"])
    train_step(a, opt_a, x, target)
    train_step(b, opt_b, x, target)
    for key, value in a.state_dict().items():
        assert rel(b.state_dict()[key], value) < 1e-5, key
    # an optimiser saved alone names the parameters by their Parameter names, matched by position
    sopt.save(tmp_path / "opt.npz", optimizer=opt_a)
    c = build(dst, seed=3)
    opt_c = Adam(c.parameters(), lr=0.01)
    sopt.load(tmp_path / "opt.npz", optimizer=opt_c)
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(c.state_dict()[key], value, err_msg=key)


def test_a_checkpoint_of_the_flat_params_still_loads(tmp_path) -> None:
    """What sopt.save wrote when FullyFusedMLP's named_parameters() was one flat ``params`` (and its optimiser
    held that one Parameter): the flat entry is read as the per-layer windows, its optimiser state too."""
    old = FullyFusedMLP(IN, OUT, HIDDEN, LAYERS, activation="tanh", seed=1)
    old_opt = Adam([old.params], lr=0.01)   # the optimiser over the flat Parameter, as model.parameters() was
    x, target = batch(seed=6)
    train_step(old, old_opt, x, target)
    sopt.save(tmp_path / "old.npz", {"params": old.params}, optimizer=old_opt)
    new = FullyFusedMLP(IN, OUT, HIDDEN, LAYERS, activation="tanh", seed=2)
    opt = Adam(new.parameters(), lr=0.01)
    sopt.load(tmp_path / "old.npz", new, optimizer=opt)
    np.testing.assert_array_equal(new.params.numpy(), old.params.numpy())
    flat_state, state = old_opt.state_dict(), opt.state_dict()
    assert state["step"] == 1 and state["param_groups"][0]["params"] == list(range(6))
    for i, w in enumerate(new.parameters()):
        np.testing.assert_array_equal(state["state"][i]["exp_avg"], flat_state["state"][0]["exp_avg"][w.index])
    train_step(old, old_opt, x, target)
    train_step(new, opt, x, target)
    np.testing.assert_allclose(new.params.numpy(), old.params.numpy(), rtol=1e-6, atol=1e-7)
    # inside a Sequential the flat Parameter was "1.params"
    seq_old = FullyFusedMLP(8, 1, 8, 1, seed=3)
    sopt.save(tmp_path / "seq.npz", {"0.table": sopt.Parameter([1.0]), "1.params": seq_old.params})
    seq = Sequential(FrequencyEncoding(2, 2), FullyFusedMLP(8, 1, 8, 1, seed=4))
    with pytest.raises(sopt.CheckpointError, match=r"parameter names differ; not in the checkpoint: \[\], in the "
                                                   r"checkpoint but not given: \['0.table'\]"):
        sopt.load(tmp_path / "seq.npz", seq)
    sopt.save(tmp_path / "seq.npz", {"1.params": seq_old.params})
    sopt.load(tmp_path / "seq.npz", seq)
    assert [k for k, _ in seq.named_parameters()] == ["1.0.weight", "1.0.bias", "1.1.weight", "1.1.bias"]
    np.testing.assert_array_equal(seq[1].params.numpy(), seq_old.params.numpy())


def test_windows_given_in_part_in_two_groups_or_beside_their_base_are_refused() -> None:
    ff = FullyFusedMLP(IN, OUT, HIDDEN, LAYERS, seed=0)
    w = ff.parameters()
    with pytest.raises(ValueError, match=r"^the optimiser was given parameter '0.weight' but not \['2.weight', "
                                         r"'2.bias'\], which share one buffer \('params'\) with it; a step updates "
                                         r"all of them: pass them all$"):
        Adam(w[:4], lr=0.1)
    with pytest.raises(ValueError, match=r"^parameter '0.bias' is in param group 1 and its sibling window\(s\) of "
                                         r"'params' in group 0; one Parameter's windows share one update: put them "
                                         r"in one group$"):
        Adam([{"params": w[::2]}, {"params": w[1::2], "weight_decay": 0.0}], lr=0.1)
    with pytest.raises(ValueError, match=r"^parameter 'params' is given both whole and as its window '0.weight'$"):
        Adam([*w, ff.params], lr=0.1)
    assert ff.params.owner is None   # nothing changed
    opt = Adam(w, lr=0.1)
    assert ff.params.owner is opt.arena and all(p.owner is opt.arena for p in w)
    assert all(isinstance(p, ParameterWindow) and p.base is ff.params for p in w)

"""One MLP (issue 20 item 4): FullyFusedMLP and the layer-by-layer MLP share activations (names, parameters,
overflow-safe maths), initialisation, frequency-encoding maths and parameter names, so that after
``ff.load_state_dict(mlp.state_dict())`` they compute the same outputs and gradients; Module.state_dict /
load_state_dict."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.nn import MLP, FullyFusedMLP, LeakyReLU, Sigmoid, Softplus, vjp
from sopt.nn.activation import activation_class

# every activation both networks support, with non-default parameters where it has any
ACTIVATIONS = {
    "relu": "ReLU",
    "leaky_relu": {"otype": "LeakyReLU", "slope": 0.2},
    "sigmoid": "Sigmoid",
    "tanh": "tanh",
    "silu": "SiLU",
    "softplus": {"otype": "Softplus", "beta": 2.0, "threshold": 3.0},
    "sine": {"otype": "Sine", "w0": 5.0},
}


def close(a: np.ndarray, b: np.ndarray, what: str) -> None:
    scale = max(1.0, float(np.abs(b).max()))
    assert np.abs(a - b).max() <= 1e-5 * scale, f"{what}: max difference {np.abs(a - b).max()} (scale {scale})"


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_fused_equals_layer_by_layer_after_load_state_dict(name):
    """Hidden and output activation both ``name``: 2 outputs and 2 hidden layers fold the output layer into
    the last hidden layer's backward kernel, so every place the fused kernels apply an activation is used."""
    spec = ACTIVATIONS[name]
    # 8 features into the first Linear either way (2 inputs x 2 frequencies x sin, cos), so the layer-by-layer
    # network compiles two Linear shapes, not three
    enc = {"otype": "Frequency", "n_frequencies": 2} if name in ("relu", "sine") else None
    n_in = 2 if enc else 8
    mlp = MLP(n_in, 2, 8, 2, activation=spec, output_activation=spec, encoding=enc, seed=1)
    ff = FullyFusedMLP(n_in, 2, 8, 2, activation=spec, output_activation=spec, encoding=enc, seed=2)
    assert ff.activation == name
    sd = mlp.state_dict()
    assert [(k, v.shape) for k, v in ff.state_dict().items()] == [(k, v.shape) for k, v in sd.items()]
    ff.load_state_dict(sd)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (70, n_in)).astype(np.float32)
    dy = rng.normal(size=(70, 2)).astype(np.float32)
    y, dx, grads = vjp(mlp, x, dy)
    fy, fdx, fgrads = vjp(ff, x, dy)
    close(fy, y, "output")
    close(fdx, dx, "input gradient")
    assert list(fgrads) == list(grads)
    for key in grads:
        close(fgrads[key], grads[key], f"gradient of {key}")


def test_same_seed_gives_the_same_weights():
    for act in ("relu", {"otype": "LeakyReLU", "slope": 0.1}, "sine", "tanh"):
        mlp, ff = MLP(2, 3, 8, 2, activation=act, seed=5), FullyFusedMLP(2, 3, 8, 2, activation=act, seed=5)
        for (key, a), (fkey, b) in zip(mlp.state_dict().items(), ff.state_dict().items(), strict=True):
            assert key == fkey and np.array_equal(a, b), f"{act}: {key}"
    enc = {"otype": "Frequency", "n_frequencies": 3}
    assert list(FullyFusedMLP(2, 1, 8, 1, encoding=enc).state_dict()) == ["1.weight", "1.bias", "2.weight", "2.bias"]


def test_state_dict_round_trip():
    ff = FullyFusedMLP(3, 2, 8, 2, seed=0)
    other = FullyFusedMLP(3, 2, 8, 2, seed=9)
    sd = ff.state_dict()
    sd["0.weight"][0, 0] = 0.5   # a copy: changing it changes nothing in ff
    assert ff.state_dict()["0.weight"][0, 0] != 0.5
    assert other.load_state_dict(sd) == ([], [])
    for key, value in other.state_dict().items():
        assert value.dtype == np.float32 and np.array_equal(value, sd[key]), key
    i_pad, i_log, o, off = other.layers[0]   # the padding column stays zero
    assert not other.params.numpy()[off:off + o * i_pad].reshape(o, i_pad)[:, i_log:].any()
    mlp = MLP(3, 2, 8, 2, seed=4)
    mlp.load_state_dict(other.state_dict())
    assert all(np.array_equal(a, b) for a, b in zip(mlp.state_dict().values(), sd.values()))


def test_load_state_dict_errors_change_nothing():
    mlp = MLP(3, 2, 8, 1, seed=0)
    before = mlp.state_dict()
    sd = dict(before)
    sd.pop("1.bias")
    sd["0.weight"] = np.zeros((8, 4))
    sd["2.weight"] = np.zeros((2, 8))
    with pytest.raises(ValueError, match=r"^MLP.load_state_dict: missing keys \['1.bias'\]; unexpected keys "
                                         r"\['2.weight'\]; '0.weight' has shape \(8, 4\), expected \(8, 3\)"):
        mlp.load_state_dict(sd)
    assert all(np.array_equal(a, b) for a, b in zip(mlp.state_dict().values(), before.values()))
    ff = FullyFusedMLP(3, 2, 8, 1)
    with pytest.raises(ValueError, match=r"'0.bias' contains 8 non-finite value"):
        ff.load_state_dict({**ff.state_dict(), "0.bias": np.full(8, np.nan)})
    with pytest.raises(ValueError, match="expected a mapping of parameter name -> array"):
        ff.load_state_dict([("0.weight", np.zeros((8, 3)))])
    # strict=False: missing and unexpected keys are returned, the rest loaded; shapes are still checked
    partial = {"0.bias": np.ones(8), "extra": np.ones(1)}
    assert ff.load_state_dict(partial, strict=False) == (["0.weight", "1.weight", "1.bias"], ["extra"])
    assert np.array_equal(ff.state_dict()["0.bias"], np.ones(8, np.float32))
    with pytest.raises(ValueError, match=r"'0.bias' has shape \(7,\), expected \(8,\)"):
        ff.load_state_dict({"0.bias": np.ones(7)}, strict=False)


def test_activation_names_are_normalised_once():
    for spelling in ("LeakyReLU", "leaky_relu", "leakyrelu", "LEAKY_RELU"):
        assert activation_class(spelling) is LeakyReLU
        assert FullyFusedMLP(2, 1, 8, 1, activation=spelling).activation == "leaky_relu"
    assert activation_class("None") is None and activation_class("identity") is None
    ff = FullyFusedMLP(2, 1, 8, 1, activation={"otype": "LeakyReLU", "slope": 0.3}, output_activation=Sigmoid())
    assert ff.activation_module.slope == 0.3 and ff.output_activation == "sigmoid"
    with pytest.raises(ValueError, match=r"^unknown activation 'gelu': FullyFusedMLP activation must be one of "
                                         r"'identity', 'leaky_relu', .*'tanh' \(case and underscores ignored\)$"):
        FullyFusedMLP(2, 1, 8, 1, activation="gelu")
    with pytest.raises(ValueError, match=r"^unknown activation 'Swish2': MLP activation must be one of"):
        MLP(2, 1, 8, 1, activation="Swish2")
    with pytest.raises(ValueError, match="LeakyReLU got unknown option"):
        FullyFusedMLP(2, 1, 8, 1, activation={"otype": "LeakyReLU", "w0": 3.0})
    with pytest.raises(ValueError, match="options a config cannot hold"):
        ff.to_config()
    assert FullyFusedMLP(2, 1, 8, 1, activation="leaky_relu").to_config().activation == "LeakyReLU"


# y = (act(z), act(-z)) through a hidden layer (where="hidden") or the output layer (where="output")
_PROBE = {"hidden": {"0.weight": [[1.0], [-1.0], [0.0], [0.0]], "0.bias": np.zeros(4),
                     "1.weight": np.eye(2, 4), "1.bias": np.zeros(2)},
          "output": {"0.weight": np.eye(4, 1), "0.bias": np.zeros(4),
                     "1.weight": [[1.0, 0, 0, 0], [-1.0, 0, 0, 0]], "1.bias": np.zeros(2)}}


@pytest.mark.parametrize("where", _PROBE)
@pytest.mark.parametrize("z", [100.0, 1000.0])
def test_sigmoid_and_softplus_are_overflow_safe_in_both(z, where):
    """|z| = 100, 1000 (exp(|z|) overflows float32): values and gradients finite and right in both networks."""
    # (activation, value at z, at -z, dx = act'(z) - act'(-z)); Softplus' linear shortcut is off at threshold 1e9
    for act, value, negative, dx_expected in ((Sigmoid(), 1.0, 0.0, 0.0), (Softplus(threshold=1e9), z, 0.0, 1.0)):
        hidden, out = (act, None) if where == "hidden" else (None, act)
        nets = [MLP(1, 2, 4, 1, activation=hidden, output_activation=out),
                FullyFusedMLP(1, 2, 4, 1, activation=hidden or "none", output_activation=out or "none")]
        for net in nets:
            net.load_state_dict(_PROBE[where])
            y, dx, _ = vjp(net, np.full((3, 1), z, np.float32), np.ones((3, 2), np.float32))
            what = f"{type(net).__name__} {act!r} at z = {z}"
            assert np.isfinite(y).all() and np.isfinite(dx).all(), what
            np.testing.assert_allclose(y, [[value, negative]] * 3, rtol=1e-6, atol=1e-6, err_msg=what)
            np.testing.assert_allclose(dx, dx_expected, atol=1e-6, err_msg=what)

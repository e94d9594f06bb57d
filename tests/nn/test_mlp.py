"""MLP: a whole network's forward and gradients against a float64 numpy MLP with the same weights,
initialisation conventions, and the tiny-cuda-nn style configuration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sopt.nn import MLP, FrequencyEncoding, HashGridEncoding, Linear, gradcheck, make_encoding, vjp
from tests.nn.reference import activation as ref_activation, frequency as ref_frequency


def reference_mlp(model: MLP, x: np.ndarray, dy: np.ndarray, act: str, out_act: str, n_freqs: int | None):
    """(y, dx, grads by parameter name) of the MLP in float64, weights read out of its Parameters."""
    h = x.astype(np.float64)
    jac = None
    if n_freqs is not None:
        h, jac = ref_frequency(h, n_freqs)
    offset = 1 if n_freqs is not None else 0
    inputs, derivs = [], []
    for k, layer in enumerate(model.layers):
        w = layer.weight.numpy().astype(np.float64)
        b = layer.bias.numpy().astype(np.float64)
        inputs.append(h)
        h, d = ref_activation(act if k < len(model.layers) - 1 else out_act, h @ w.T + b)
        derivs.append(d)
    y = h
    g = dy.astype(np.float64)
    grads = {}
    for k in reversed(range(len(model.layers))):
        dz = g * derivs[k]
        grads[f"{k + offset}.weight"] = dz.T @ inputs[k]
        grads[f"{k + offset}.bias"] = dz.sum(0)
        g = dz @ model.layers[k].weight.numpy().astype(np.float64)
    dx = np.einsum("no,noi->ni", g, jac) if jac is not None else g
    return y, dx, grads


@pytest.mark.parametrize("act,out_act,n_freqs", [("relu", "none", 3), ("tanh", "sigmoid", None)])
def test_whole_mlp_matches_numpy(act, out_act, n_freqs):
    encoding = {"otype": "Frequency", "n_frequencies": n_freqs} if n_freqs else None
    model = MLP(2, 3, hidden_features=16, hidden_layers=3, activation=act,
                output_activation=None if out_act == "none" else out_act, encoding=encoding, seed=4)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(48, 2)).astype(np.float32)
    dy = rng.normal(size=(48, 3)).astype(np.float32)
    y, dx, grads = vjp(model, x, dy)
    ry, rdx, rgrads = reference_mlp(model, x, dy, act, out_act, n_freqs)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)
    assert set(grads) == set(rgrads)
    for name in grads:
        np.testing.assert_allclose(grads[name], rgrads[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_benchmark_shaped_mlp_matches_numpy():
    # the benchmark's network (frequency encoding -> 3 x 64 ReLU -> 3) over two weight-gradient chunks
    model = MLP(2, 3, hidden_features=64, hidden_layers=3, activation="relu",
                encoding={"otype": "Frequency", "n_frequencies": 4}, seed=0)
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, size=(600, 2)).astype(np.float32)
    dy = rng.normal(size=(600, 3)).astype(np.float32)
    y, dx, grads = vjp(model, x, dy)
    ry, rdx, rgrads = reference_mlp(model, x, dy, "relu", "none", 4)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4 * np.abs(rdx).max())
    for name in grads:
        np.testing.assert_allclose(grads[name], rgrads[name], rtol=1e-4, atol=1e-5 * np.abs(rgrads[name]).max(),
                                   err_msg=name)


def test_gradcheck_mlp_with_hash_grid():
    model = MLP(2, 2, hidden_features=8, hidden_layers=1, activation="softplus",
                encoding={"otype": "HashGrid", "n_levels": 2, "n_features_per_level": 2, "log2_hashmap_size": 4,
                          "base_resolution": 2, "per_level_scale": 2.0}, seed=1)
    model.encoding.table.load(np.random.default_rng(2).normal(size=model.encoding.table.shape))
    x = np.array([[0.2, 0.3], [0.61, 0.14], [0.4, 0.9], [0.85, 0.55], [0.1, 0.7]])   # away from cell faces
    result = gradcheck(model, x, eps=1e-4, atol=2e-3, n_checks=6)
    assert result.ok, str(result)
    assert {e.where.split("[")[0] for e in result.entries} == {
        "input", "param '0.table'", "param '1.weight'", "param '1.bias'", "param '2.weight'", "param '2.bias'"}


def test_structure_and_names():
    model = MLP(3, 4, hidden_features=32, hidden_layers=2, encoding={"otype": "Frequency", "n_freqs": 2})
    assert isinstance(model[0], FrequencyEncoding) and len(model.layers) == 3
    assert [(l.in_features, l.out_features) for l in model.layers] == [(12, 32), (32, 32), (32, 4)]
    assert [type(l.activation).__name__ for l in model.layers] == ["ReLU", "ReLU", "NoneType"]
    assert [n for n, _ in model.named_parameters()] == ["1.weight", "1.bias", "2.weight", "2.bias", "3.weight", "3.bias"]
    assert (model.in_features, model.out_features) == (3, 4)
    single = MLP(2, 1, hidden_features=8, hidden_layers=0)
    assert len(single.layers) == 1 and single.layers[0].activation is None


def test_relu_networks_get_kaiming_and_zero_biases():
    model = MLP(64, 2, hidden_features=64, hidden_layers=2, activation="relu", seed=3)
    bound = math.sqrt(2.0) * math.sqrt(3.0 / 64)
    for layer in model.layers[:2]:
        w = layer.weight.numpy()
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
        assert not layer.bias.numpy().any()
    out = model.layers[2]   # not followed by a ReLU: torch's default
    assert np.abs(out.weight.numpy()).max() <= 1 / 8 and out.bias.numpy().any()


def test_sine_networks_get_siren_initialisation():
    model = MLP(2, 1, hidden_features=64, hidden_layers=2, activation={"otype": "Sine", "w0": 30.0}, seed=0)
    first, hidden, last = (np.abs(l.weight.numpy()).max() for l in model.layers)
    assert 0.9 * 0.5 < first <= 0.5                                           # U(-1/in, 1/in), in = 2
    bound = math.sqrt(6.0 / 64) / 30.0
    assert 0.9 * bound < hidden <= bound and 0.9 * bound < last <= bound     # U(-sqrt(6/in)/w0, ...)


def test_make_encoding_accepts_tcnn_and_own_names():
    grid = make_encoding({"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 4, "log2_hashmap_size": 8,
                          "base_resolution": 8, "per_level_scale": 1.5}, 3)
    assert isinstance(grid, HashGridEncoding)
    assert (grid.n_levels, grid.n_features, grid.log2_table_size, grid.base_resolution, grid.per_level_scale) == \
        (4, 4, 8, 8, 1.5)
    same = make_encoding({"otype": "Grid", "type": "Hash", "n_levels": 4, "n_features": 4, "log2_table_size": 8,
                          "base_resolution": 8, "per_level_scale": 1.5}, 3)
    assert same.levels == grid.levels
    with pytest.raises(ValueError, match="unknown option"):
        make_encoding({"otype": "Frequency", "n_frequencies": 2, "include_input": True}, 2)
    with pytest.raises(ValueError, match="unknown encoding otype"):
        make_encoding({"otype": "OneBlob"}, 2)
    with pytest.raises(ValueError, match="takes 3 features"):
        MLP(2, 1, 8, 1, encoding=FrequencyEncoding(3, 2))
    with pytest.raises(ValueError, match="hidden_layers"):
        MLP(2, 1, 8, -1)


def test_mlp_without_bias():
    model = MLP(2, 1, hidden_features=4, hidden_layers=1, bias=False)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "1.weight"]
    assert all(isinstance(m, Linear) and m.bias is None for m in model)


# every module constructor and config dict, one argument at a time given a value of the wrong type
from sopt.nn import FullyFusedMLP, LeakyReLU, Sine, Softplus, make_activation  # noqa: E402

_MODULE_ARGS = [
    ("Linear", lambda **k: Linear(**{"in_features": 2, "out_features": 3, **k}),
     {"in_features": "int", "out_features": "int", "bias": "flag", "seed": "int"}),
    ("LeakyReLU", lambda **k: LeakyReLU(**k), {"slope": "number"}),
    ("Softplus", lambda **k: Softplus(**k), {"beta": "number", "threshold": "number"}),
    ("Sine", lambda **k: Sine(**k), {"w0": "number"}),
    ("LeakyReLU", lambda **k: make_activation({"otype": "LeakyReLU", **k}), {"slope": "number"}),
    ("FrequencyEncoding", lambda **k: FrequencyEncoding(**{"in_dims": 2, "n_freqs": 3, **k}),
     {"in_dims": "int", "n_freqs": "int"}),
    ("HashGridEncoding", lambda **k: HashGridEncoding(**{"in_dims": 2, "n_levels": 2, "log2_table_size": 6, **k}),
     {"in_dims": "int", "n_levels": "int", "n_features": "int", "log2_table_size": "int", "base_resolution": "int",
      "per_level_scale": "number", "seed": "int"}),
    ("HashGridEncoding", lambda **k: make_encoding({"otype": "HashGrid", "n_levels": 2, "log2_hashmap_size": 6,
                                                    **{{"n_features": "n_features_per_level"}.get(n, n): v
                                                       for n, v in k.items()}}, 2),
     {"n_levels": "int", "n_features": "int", "base_resolution": "int", "per_level_scale": "number"}),
    ("MLP", lambda **k: MLP(**{"in_features": 2, "out_features": 1, "hidden_features": 8, "hidden_layers": 1, **k}),
     {"in_features": "int", "out_features": "int", "hidden_features": "int", "hidden_layers": "int", "bias": "flag",
      "seed": "int"}),
    ("FullyFusedMLP", lambda **k: FullyFusedMLP(**{"in_features": 2, "out_features": 1, "hidden_features": 8,
                                                   "hidden_layers": 1, **k}),
     {"in_features": "int", "out_features": "int", "hidden_features": "int", "hidden_layers": "int", "seed": "int",
      "activation": "str", "output_activation": "str"}),
    ("FullyFusedMLP", lambda **k: FullyFusedMLP(2, 1, 8, 1, encoding={"otype": "Frequency", **k}),
     {"n_frequencies": "int"}),
]
_BAD = {"number": ("0.5", True, None), "int": ("5", True, 2.0), "flag": (1, "yes", None), "str": (5, None, ["relu"])}
_MODULE_CASES = [(owner, make, name, bad) for owner, make, args in _MODULE_ARGS for name, kind in args.items()
                 for bad in _BAD[kind]]


@pytest.mark.parametrize("owner,make,name,bad", _MODULE_CASES,
                         ids=[f"{o}-{n}-{b!r}" for o, _, n, b in _MODULE_CASES])
def test_module_arguments_of_the_wrong_type_are_rejected(owner, make, name, bad):
    with pytest.raises(ValueError, match=rf"^{owner} {name} must be"):
        make(**{name: bad})


@pytest.mark.parametrize("spec,match", [
    ({"otype": 5}, r"encoding otype must be a string"),
    ({"otype": "Grid", "type": 1}, r"only type 'Hash' is supported, got 1"),
    ({"otype": "HashGrid", "interpolation": True}, r"only 'Linear' interpolation is supported, got True"),
])
def test_encoding_config_strings_must_be_strings(spec, match):
    with pytest.raises(ValueError, match=match):
        make_encoding(spec, 2)


def test_deterministic_reaches_every_layer_with_a_reduction():
    grid = {"otype": "HashGrid", "n_levels": 2, "log2_hashmap_size": 6, "base_resolution": 4}
    model = MLP(2, 1, 8, 1, encoding=grid, deterministic=True)
    assert model.encoding.deterministic and all(layer.deterministic for layer in model.layers)
    assert not any(layer.deterministic for layer in MLP(2, 1, 8, 1).layers)
    kept = MLP(2, 1, 8, 1, encoding={**grid, "deterministic": False}, deterministic=True)   # the dict's own value
    assert not kept.encoding.deterministic and kept.layers[0].deterministic
    assert make_encoding({**grid, "deterministic": True}, 2).deterministic
    with pytest.raises(ValueError, match="MLP deterministic must be True or False, got 'true'"):
        MLP(2, 1, 8, 1, deterministic="true")

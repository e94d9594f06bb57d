"""TensorCoreMLP as the "network" otype "TensorCoreMLP": its config's bounds and allowed activations, the registry
building it (a clear error off CUDA, naming network.otype and FullyFusedMLP), its to_config round trip (CUDA), its
state_dict keys, shapes and values equal to FullyFusedMLP's for the same sizes and seed (computed without running
its kernels), and a neural-field config refusing an encoding wider than it takes or a device that is not CUDA."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.runtime import device as dev
from sopt.config.registry import as_config, build, otypes
from sopt.config.schema import ConfigError
from sopt.nn import flat_layers
from sopt.nn.activation import make_activation
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.tensor_core_mlp import TensorCoreMLP, TensorCoreMLPConfig, flat_layout, initial_flat
from problems import neural_field_config
from problems.neural_field_image import load_config


@pytest.mark.parametrize("section, line", [
    ({"n_neurons": 40}, "config network.n_neurons = 40: must be a multiple of 16"),
    ({"n_neurons": 0}, "config network.n_neurons = 0: must be greater than or equal to 16"),
    ({"n_neurons": 80}, "config network.n_neurons = 80: must be less than or equal to 64"),
    ({"n_hidden_layers": 0}, "config network.n_hidden_layers = 0: must be greater than or equal to 1"),
    ({"activation": "SiLU"},
     "config network.activation = 'SiLU': must be 'None', 'ReLU', 'LeakyReLU', 'Sigmoid' or 'Tanh'"),
    ({"output_activation": "Sine"}, "config network.output_activation = 'Sine': must be 'None', 'ReLU', "),
    ({"loss_scale": 0.5}, "config network.loss_scale = 0.5: must be greater than or equal to 1"),
    ({"loss_scale": 131072.0}, "config network.loss_scale = 131072.0: must be less than or equal to 65536"),
])
def test_config_errors_name_the_key_and_what_is_allowed(section: dict, line: str) -> None:
    with pytest.raises(ConfigError) as info:
        as_config("network", {"otype": "TensorCoreMLP", **section})
    assert line in str(info.value)


def test_registered_in_the_network_family_with_tiny_cuda_nns_defaults() -> None:
    assert otypes("network")[-1] == "TensorCoreMLP"
    config = as_config("network", {"otype": "TensorCoreMLP", "n_neurons": 32, "activation": "Tanh"})
    assert isinstance(config, TensorCoreMLPConfig)
    assert (config.n_neurons, config.n_hidden_layers, config.activation, config.output_activation,
            config.loss_scale) == (32, 2, "Tanh", "None", 128.0)


def test_build_off_cuda_says_network_otype_runs_on_cuda_only() -> None:
    if dev.device_kind() == "cuda":
        pytest.skip("CUDA builds it: test_to_config_round_trip")
    with pytest.raises(RuntimeError, match=r"network.otype = 'TensorCoreMLP' runs on CUDA only.*this device is "
                                           r"'vulkan': use 'FullyFusedMLP'"):
        build("network", {"otype": "TensorCoreMLP"}, 32, 3, seed=1, deterministic=True)


def test_build_refuses_an_encoding_but_frequency() -> None:   # before the device check, so on any device
    with pytest.raises(ValueError, match="fuses only a Frequency encoding, got 'HashGrid'; put other encodings"):
        build("network", {"otype": "TensorCoreMLP"}, 2, 3, encoding=as_config("encoding", {"otype": "HashGrid"}))


@pytest.mark.skipif(dev.device_kind() != "cuda", reason="TensorCoreMLP runs on CUDA only")
def test_to_config_round_trip() -> None:
    config = as_config("network", {"otype": "TensorCoreMLP", "n_neurons": 48, "n_hidden_layers": 3,
                                   "activation": "LeakyReLU", "output_activation": "Sigmoid", "loss_scale": 1024.0})
    net = build("network", config, 20, 5, seed=4, deterministic=True)
    assert isinstance(net, TensorCoreMLP) and net.to_config() == config
    again = type(net).from_config(net.to_config(), 20, 5, seed=4)
    np.testing.assert_array_equal(again.params.numpy(), net.params.numpy())
    ff = FullyFusedMLP(20, 5, 48, 3, activation="leaky_relu", output_activation="sigmoid", seed=4)
    ff.load_state_dict(net.state_dict())   # a checkpoint of one loads into the other
    np.testing.assert_array_equal(ff.params.numpy(), net.params.numpy())


@pytest.mark.parametrize("in_f, hidden, layers, out_f", [(32, 64, 2, 3), (7, 16, 3, 20)])
def test_state_dict_is_fully_fused_mlps(in_f: int, hidden: int, layers: int, out_f: int) -> None:
    ff = FullyFusedMLP(in_f, out_f, hidden, layers, seed=5)
    table, _ = flat_layout(in_f, hidden, layers, out_f)
    assert table == ff.layers == flat_layers.flat_layout(in_f, hidden, layers, out_f)[0]
    want = ff.state_dict()
    assert flat_layers.state_shapes(table) == {k: v.shape for k, v in want.items()}
    # TensorCoreMLP.as_state_dict on its layout, without its constructor (which needs CUDA)
    tc = object.__new__(TensorCoreMLP)
    tc.layers, tc.n_frequencies = table, 0
    got = tc.as_state_dict(initial_flat(in_f, hidden, layers, out_f, make_activation("relu"), None, seed=5))
    assert list(got) == list(want) == [f"{j}.{p}" for j in range(layers + 1) for p in ("weight", "bias")]
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_flat_layers_round_trip_and_partial_load() -> None:
    table, n = flat_layers.flat_layout(5, 16, 1, 3)
    assert [row[3] for row in table] == [0, 8 * 16 + 16] and n == 144 + 16 * 3 + 3 + 1
    flat = np.arange(n, dtype=np.float32) + 1.0
    state = flat_layers.as_state_dict(table, flat)
    assert {k: v.shape for k, v in state.items()} == {"0.weight": (16, 5), "0.bias": (16,), "1.weight": (3, 16),
                                                       "1.bias": (3,)}
    layers = [(state["0.weight"], state["0.bias"]), (state["1.weight"], state["1.bias"])]
    rebuilt = flat_layers.flatten(table, layers)
    padding = np.zeros(n, bool)
    padding[np.arange(16) * 8 + 5] = padding[np.arange(16) * 8 + 6] = padding[np.arange(16) * 8 + 7] = True
    padding[-1] = True   # the gap after the last layer (51 floats rounded up to 52)
    np.testing.assert_array_equal(rebuilt[~padding], flat[~padding])
    assert not rebuilt[padding].any()
    loaded = flat_layers.load_state(table, rebuilt, {"1.bias": np.array([-1.0, -2.0, -3.0], np.float32)})
    np.testing.assert_array_equal(loaded[-4:-1], [-1.0, -2.0, -3.0])
    np.testing.assert_array_equal(loaded[:-4], rebuilt[:-4])
    with pytest.raises(ValueError, match=r"expected W \(3, 16\) and b \(3,\), got \(3, 15\)"):
        flat_layers.check_layers(table, [layers[0], (np.zeros((3, 15)), np.zeros(3))], "test")


def test_a_neural_field_config_refuses_it_off_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOPT_DEVICE", "vulkan")
    with pytest.raises(ConfigError) as info:
        load_config(network={"otype": "TensorCoreMLP"})
    assert ("config network.otype = 'TensorCoreMLP': runs on CUDA only (half-precision tensor-core MMAs); "
            "SOPT_DEVICE=vulkan selects another backend: use 'FullyFusedMLP'") in str(info.value)


def test_a_neural_field_config_refuses_an_encoding_wider_than_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(neural_field_config, "cuda_unavailable", lambda: None)
    with pytest.raises(ConfigError) as info:
        load_config(network={"otype": "TensorCoreMLP"}, encoding={"otype": "Frequency", "n_frequencies": 21})
    assert str(info.value).count("\n") == 0, str(info.value)   # that one line
    assert ("config encoding.n_frequencies = 21: the encoding gives 84 features; TensorCoreMLP takes at most 80"
            in str(info.value))
    config = load_config(network={"otype": "TensorCoreMLP", "n_neurons": 32, "n_hidden_layers": 3},
                         encoding={"otype": "Frequency", "n_frequencies": 16})
    # L H halves saved + L H + O16 halves of deltas + K0 = 64 halves of layer 0's inputs (2 x 16 x 2 = 64 features)
    # a sample: 96 + 8 + 32 floats, against FullyFusedMLP's 2 L H = 192
    assert config._network_floats() == 32 * 3 + 16 // 2 + 64 // 2
    assert config._widest() == 64 and config.model_copy(update={"encoding": config.encoding.model_copy(
        update={"n_frequencies": 4})})._widest() == (32 * 3 + 16 + 1) // 2

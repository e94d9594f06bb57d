"""sopt.config.registry: every family's otypes, configs documented and bounded, round trips through the configs
(the rebuilt component gives the same numbers), and one-line errors for an unknown otype or key."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Literal

import annotated_types
import numpy as np
import pytest
from pydantic import BaseModel, Field

import sopt
from sopt.config import registry
from sopt.config.registry import ComponentConfig, build, families, otypes, register, union
from sopt.config.schema import ConfigError, StrictModel, validate
from sopt.nn import vjp
from tests.optim.reference import ReferenceOptimizer

FAMILIES = {
    "optimizer": {"Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Lion"},
    "schedule": {"Constant", "WarmupCosine", "Step", "Exponential"},
    "encoding": {"Frequency", "HashGrid", "Identity"},
    "network": {"MLP", "FullyFusedMLP", "TensorCoreMLP"},
    "loss": {"L2", "L1", "Huber", "RelativeL2"},
    "simulator": {"Projectile", "SpringSystem", "Diffusion2D", "Wave2D", "NBody"},
}


def test_every_family_lists_its_otypes() -> None:
    assert set(families()) >= set(FAMILIES)
    for family, names in FAMILIES.items():
        listed = set(otypes(family))
        assert listed >= names, family
        # others are registered by code outside sopt that a test imported (examples/pendulum_chain registers a
        # simulator the same way a user's package would)
        for extra in listed - names:
            assert not registry.entry(family, extra).component.__module__.startswith("sopt."), (family, extra)
        for name in names:
            entry = registry.entry(family, name)
            assert entry.component.otype == name and entry.component.config_class is entry.config
            assert entry.config().otype == name   # every key has a default


def test_every_config_key_is_documented_and_every_number_bounded() -> None:
    for family in FAMILIES:
        for name in otypes(family):
            config = registry.entry(family, name).config
            for key, field in config.model_fields.items():
                if key == "otype":
                    continue
                assert field.description and "\n" not in field.description, f"{family} {name}.{key}"
                numeric = field.annotation in (int, float, int | None, float | None)
                if numeric:
                    bounds = [m for m in field.metadata if isinstance(m, (annotated_types.Ge, annotated_types.Gt))]
                    uppers = [m for m in field.metadata if isinstance(m, (annotated_types.Le, annotated_types.Lt))]
                    assert bounds and uppers, f"{family} {name}.{key} has no bounds"


def test_a_family_loads_its_components_on_first_use_and_nothing_heavy() -> None:
    code = ("import sys; from sopt.config.registry import families, otypes, union; "
            "print(sorted(m for m in ('slangpy', 'sopt.optim', 'sopt.nn') if m in sys.modules)); "
            "union('optimizer'); print(sorted(m for m in ('sopt.optim', 'sopt.nn') if m in sys.modules)); "
            "print(sum(len(otypes(f)) for f in families())); "
            "print(sorted(m for m in ('matplotlib', 'ray', 'problems', 'sopt.experiments') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"                      # the registry alone imports no component (nor slangpy)
    assert out[1] == "['sopt.optim']"          # a family imports its own modules only
    assert int(out[2]) >= sum(len(v) for v in FAMILIES.values())
    assert out[3] == "[]"


# -- errors ----------------------------------------------------------------------------------------------------------
class Schema(StrictModel):
    optimizer: union("optimizer") = Field(default_factory=lambda: sopt.optim.AdamConfig(),  # type: ignore[valid-type]
                                          description="optimiser")
    encoding: union("encoding") = Field(default_factory=lambda: sopt.nn.FrequencyConfig(),  # type: ignore[valid-type]
                                        description="encoding")


@pytest.mark.parametrize("data,line", [
    ({"optimizer": {"otype": "Adamm"}},
     "config optimizer.otype: otype 'Adamm'; did you mean 'Adam'? allowed: "),
    ({"optimizer": {"otype": "RMSProp"}}, "config optimizer.otype: otype 'RMSProp'; did you mean 'RMSprop'?"),
    ({"encoding": {"otype": "Hashgrid"}}, "config encoding.otype: otype 'Hashgrid'; did you mean 'HashGrid'?"),
    ({"encoding": {"n_frequencies": 6, "otype": None}}, "config encoding.otype: otype None"),
    ({"encoding": {"n_frequencies": 6}}, "config encoding.otype: no otype"),
    ({"optimizer": {"otype": "SGD", "learnig_rate": 0.1}},
     "config optimizer.learnig_rate = 0.1: unknown key; did you mean 'learning_rate'?"),
    ({"optimizer": {"otype": "AdamW", "beta2": 1.0}}, "config optimizer.beta2 = 1.0: must be less than 1"),
    ({"encoding": {"otype": "HashGrid", "n_levels": 33}}, "config encoding.n_levels = 33: must be less than or equal "
                                                          "to 32"),
])
def test_a_bad_section_is_one_line_naming_the_key(data: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(Schema, data)
    assert len(info.value.lines) == 1 and info.value.lines[0].startswith(line), info.value.lines


def test_build_validates_a_dict_and_refuses_foreign_configs() -> None:
    p = [sopt.Parameter(np.zeros(2), name="w")]
    with pytest.raises(ConfigError) as info:
        build("optimizer", {"otype": "Adamm", "learning_rate": 0.1}, p)
    assert str(info.value).startswith("config optimizer.otype: otype 'Adamm'; did you mean 'Adam'? allowed: ")
    with pytest.raises(ConfigError, match=r"^config schedule.gamma = '0.5': must be a valid number"):
        build("schedule", {"otype": "Step", "gamma": "0.5"}, None, 10)
    with pytest.raises(ValueError, match="unknown loss otype 'Adam'; allowed: L2, L1, Huber, RelativeL2"):
        build("loss", sopt.optim.AdamConfig())   # an optimizer config where a loss is wanted
    with pytest.raises(ValueError, match="loss config must be a registered config model or a dict"):
        build("loss", "L2")
    with pytest.raises(ValueError, match="unknown component family 'optimiser'; registered: .*optimizer"):
        otypes("optimiser")
    with pytest.raises(ValueError, match="unknown optimizer otype 'Foo'; allowed: "):
        registry.entry("optimizer", "Foo")


@pytest.fixture
def scratch_family():
    yield "test_widget"
    registry._REGISTRY.pop("test_widget", None)
    registry._SECTIONS.pop("test_widget", None)


class WidgetConfig(ComponentConfig):
    otype: Literal["Widget"] = "Widget"
    size: int = Field(3, ge=1, le=10, description="size (widgets)")


class GadgetConfig(ComponentConfig):
    otype: Literal["Gadget"] = "Gadget"


def test_register_a_new_family_and_its_checks(scratch_family: str) -> None:
    @register(scratch_family, "Widget", WidgetConfig)
    class Widget:
        def __init__(self, size: int) -> None:
            self.size = size

        @classmethod
        def from_config(cls, config: WidgetConfig, scale: int) -> "Widget":
            return cls(config.size * scale)

        def to_config(self) -> WidgetConfig:
            return WidgetConfig(size=self.size)

    assert otypes(scratch_family) == ["Widget"]
    assert build(scratch_family, {"otype": "Widget", "size": 4}, 2).size == 8
    with pytest.raises(ConfigError, match=r"^config test_widget.size = 11: must be less than or equal to 10"):
        build(scratch_family, {"otype": "Widget", "size": 11}, 1)
    with pytest.raises(ValueError, match="otype 'Widget' of family 'test_widget' is already"):
        register(scratch_family, "Widget", WidgetConfig)(type("Other", (Widget,), {}))
    with pytest.raises(ValueError, match="must declare otype: Literal\\['Gizmo'\\] = 'Gizmo'"):
        register(scratch_family, "Gizmo", WidgetConfig)
    with pytest.raises(ValueError, match="has no to_config method"):
        register(scratch_family, "Gadget", GadgetConfig)(type("Gadget", (), {"from_config": classmethod(lambda c, x: x)}))
    with pytest.raises(ValueError, match="config must be a StrictModel subclass"):
        register(scratch_family, "Gadget", BaseModel)


# -- optimisers: round trip and the same numbers -------------------------------------------------------------------
# (config, reference kind, the reference's torch-style hyperparameters written out from the config's keys)
OPTIMIZERS = [
    ({"otype": "Adam", "learning_rate": 0.03, "beta1": 0.8, "beta2": 0.95, "epsilon": 1e-6, "weight_decay": 0.01,
      "amsgrad": True, "max_grad_norm": 2.0},
     "adam", dict(lr=0.03, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.01, amsgrad=True)),
    ({"otype": "AdamW", "learning_rate": 0.02, "beta1": 0.7, "beta2": 0.9, "weight_decay": 0.1},
     "adamw", dict(lr=0.02, betas=(0.7, 0.9), eps=1e-8, weight_decay=0.1)),
    ({"otype": "SGD", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.05},
     "sgd", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)),
    ({"otype": "RMSprop", "learning_rate": 0.01, "alpha": 0.9, "epsilon": 1e-5, "momentum": 0.5, "centered": True},
     "rmsprop", dict(lr=0.01, alpha=0.9, eps=1e-5, momentum=0.5, centered=True)),
    ({"otype": "Adagrad", "learning_rate": 0.05, "lr_decay": 0.1, "initial_accumulator_value": 0.2, "epsilon": 1e-6},
     "adagrad", dict(lr=0.05, lr_decay=0.1, initial_accumulator_value=0.2, eps=1e-6)),
]
X0 = [np.linspace(-1.0, 1.0, 6).reshape(2, 3), np.array([0.5, -2.0, 3.0, 0.25])]
GRADS = [[np.array([[0.3, -1.2, 2.0], [0.1, 0.0, -0.7]]), np.array([1.5, -0.4, 0.2, -3.0])],
         [np.array([[-0.5, 0.8, 1.0], [0.3, -0.2, 0.4]]), np.array([0.1, 0.9, -1.1, 0.6])]]


def _params() -> list[sopt.Parameter]:
    return [sopt.Parameter(x, name=f"p{i}") for i, x in enumerate(X0)]


def _steps(opt: sopt.optim.Optimizer, params: list[sopt.Parameter]) -> list[np.ndarray]:
    for grads in GRADS:
        for p, g in zip(params, grads):
            p.set_grad(g)
        opt.step()
    return [p.numpy() for p in params]


@pytest.mark.parametrize("spec,kind,hyper", OPTIMIZERS, ids=[o[0]["otype"] for o in OPTIMIZERS])
def test_an_optimizer_round_trips_through_its_config(spec: dict[str, Any], kind: str, hyper: dict[str, Any]) -> None:
    params = _params()
    opt = build("optimizer", spec, params)
    assert type(opt).__name__ == spec["otype"]
    config = opt.to_config()
    assert config == registry.as_config("optimizer", spec)
    params2 = _params()
    rebuilt = type(opt).from_config(config, params2)
    assert rebuilt.to_config() == config
    values = _steps(opt, params)
    again = _steps(rebuilt, params2)
    reference = ReferenceOptimizer(kind, X0, max_grad_norm=spec.get("max_grad_norm"), **hyper)
    for grads in GRADS:
        reference.step(grads)
    for mine, theirs, ref, x0 in zip(values, again, reference.params, X0):
        assert np.array_equal(mine, theirs)   # the same bits
        np.testing.assert_allclose(mine, ref, rtol=2e-5, atol=1e-6)
        assert not np.allclose(mine, x0)
    assert opt.to_config() == config   # stepping changes no hyperparameter


def test_an_optimizer_config_keeps_the_learning_rate_a_schedule_started_from() -> None:
    opt = build("optimizer", {"otype": "Adam", "learning_rate": 0.04}, _params())
    schedule = build("schedule", {"otype": "WarmupCosine", "warmup_steps": 2, "final_lr_factor": 0.1}, opt, 10)
    for _ in range(5):
        schedule.step()
    assert opt.param_groups[0]["lr"] != 0.04
    assert opt.to_config().learning_rate == 0.04


def test_an_optimizer_a_config_cannot_describe_is_refused() -> None:
    with pytest.raises(ValueError, match=r"SGD.to_config: dampening=0.5 has no config key \(a config gives "
                                         r"dampening=0.0\)"):
        sopt.optim.SGD(_params(), lr=0.1, momentum=0.5, dampening=0.5).to_config()
    p = _params()
    with pytest.raises(ValueError, match=r"param group 1 differs from group 0 in \['lr'\]"):
        sopt.optim.Adam([{"params": [p[0]]}, {"params": [p[1]], "lr": 0.5}], lr=0.1).to_config()


# -- schedules ---------------------------------------------------------------------------------------------------
SCHEDULES = [
    ({"otype": "WarmupCosine", "warmup_steps": 5, "final_lr_factor": 0.1, "warmup_start_factor": 0.2},
     {0: 0.2 * 0.03, 5: 0.03, 40: 0.003, 55: 0.003}),
    ({"otype": "WarmupCosine", "warmup_steps": 100}, {38: 0.03 * 38 / 39, 39: 0.03, 40: 0.03 * 0.01}),   # warmup
    #                                                                                   cut to the steps - 1
    ({"otype": "Step", "gamma": 0.5}, {12: 0.03, 13: 0.015, 26: 0.0075}),           # step_size: 40 // 3
    ({"otype": "Step", "step_size": 7, "gamma": 0.5}, {6: 0.03, 7: 0.015}),
    ({"otype": "Exponential", "gamma": 0.9}, {0: 0.03, 3: 0.03 * 0.9**3}),
    ({"otype": "Constant", "factor": 0.5, "total_iters": 4}, {3: 0.015, 4: 0.03, 50: 0.03}),
    ({"otype": "Constant"}, {0: 0.03, 50: 0.03}),
]


@pytest.mark.parametrize("spec,expected", SCHEDULES, ids=[f"{s[0]['otype']}{i}" for i, s in enumerate(SCHEDULES)])
def test_a_schedule_round_trips_through_its_config(spec: dict[str, Any], expected: dict[int, float]) -> None:
    def optimizer() -> sopt.optim.SGD:
        return sopt.optim.SGD([sopt.Parameter(np.zeros(2), name="w")], lr=0.03)

    lrs = []
    for rebuild in (False, True):
        opt = optimizer()
        schedule = build("schedule", spec, opt, 40)
        if rebuild:
            config = schedule.to_config()
            assert config == registry.as_config("schedule", {**spec, **({"step_size": 13} if spec["otype"] == "Step"
                                                                        and "step_size" not in spec else {}),
                                                              **({"warmup_steps": 39} if spec.get("warmup_steps") == 100
                                                                 else {})})
            opt = optimizer()
            schedule = type(schedule).from_config(config, opt, 40)
        run = []
        for _ in range(60):
            run.append(opt.param_groups[0]["lr"])
            schedule.step()
        lrs.append(run)
    assert lrs[0] == lrs[1]
    for step, lr in expected.items():
        assert lrs[0][step] == pytest.approx(lr, rel=1e-12), step


# -- modules ---------------------------------------------------------------------------------------------------------
X = np.random.default_rng(0).uniform(0.0, 1.0, (37, 2)).astype(np.float32)
DY = np.random.default_rng(1).normal(size=(37, 3)).astype(np.float32)


def _same_module(a: Any, b: Any, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Forward and backward of a and b on the same batch give the same bits; returns a's y."""
    ya, dxa, ga = vjp(a, x, dy)
    yb, dxb, gb = vjp(b, x, dy)
    assert np.array_equal(ya, yb) and np.array_equal(dxa, dxb)
    assert ga.keys() == gb.keys() and all(np.array_equal(ga[k], gb[k]) for k in ga)
    return ya


@pytest.mark.parametrize("spec", [
    {"otype": "Frequency", "n_frequencies": 3},
    {"otype": "HashGrid", "n_levels": 3, "n_features_per_level": 2, "log2_hashmap_size": 7, "base_resolution": 4,
     "per_level_scale": 1.5},
    {"otype": "Identity", "scale": 2.0, "offset": -0.5},
])
def test_an_encoding_round_trips_through_its_config(spec: dict[str, Any]) -> None:
    # deterministic: the hash grid's table gradient summed in a fixed order (float atomics otherwise)
    enc = build("encoding", spec, 2, seed=5, deterministic=True)
    config = enc.to_config()
    assert config == registry.as_config("encoding", spec)
    rebuilt = type(enc).from_config(config, 2, seed=5, deterministic=True)
    dy = np.random.default_rng(2).normal(size=(37, enc.out_features)).astype(np.float32)
    y = _same_module(enc, rebuilt, X, dy)
    if spec["otype"] == "Identity":
        np.testing.assert_allclose(y, 2.0 * X - 0.5, rtol=1e-6)
    elif spec["otype"] == "Frequency":
        assert y.shape == (37, 2 * 2 * 3)
        np.testing.assert_allclose(y[:, 4], np.sin(4 * np.pi * X[:, 0]), atol=1e-5)   # d=0, k=2: sin(2^2 pi x)
    else:
        assert y.shape == (37, 6) and np.abs(y).max() > 0
        other = build("encoding", spec, 2, seed=6)   # the seed draws the table: the equality above is not trivial
        assert not np.array_equal(other.table.numpy(), enc.table.numpy())


@pytest.mark.parametrize("spec,encoding", [
    ({"otype": "MLP", "n_neurons": 16, "n_hidden_layers": 2, "activation": "Tanh", "output_activation": "Sigmoid"},
     None),
    ({"otype": "MLP", "n_neurons": 8, "n_hidden_layers": 1, "activation": "LeakyReLU"},
     {"otype": "HashGrid", "n_levels": 2, "log2_hashmap_size": 6, "base_resolution": 4}),
    ({"otype": "FullyFusedMLP", "n_neurons": 16, "n_hidden_layers": 2, "activation": "SiLU"},
     {"otype": "Frequency", "n_frequencies": 2}),
])
def test_a_network_round_trips_through_its_config(spec: dict[str, Any], encoding: dict[str, Any] | None) -> None:
    enc = registry.as_config("encoding", encoding) if encoding else None
    net = build("network", spec, 2, 3, encoding=enc, seed=3, deterministic=True)
    config = net.to_config()
    assert config == registry.as_config("network", spec)
    if spec["otype"] == "MLP":
        assert len(net.layers) == spec["n_hidden_layers"] + 1 and net.layers[0].out_features == spec["n_neurons"]
        if enc is not None:
            assert net.encoding.to_config() == enc
    else:
        assert net.hidden_features == 16 and net.n_frequencies == 2 and net.activation == "silu"
    rebuilt = type(net).from_config(config, 2, 3, encoding=enc, seed=3, deterministic=True)
    _same_module(net, rebuilt, X, DY)
    other = type(net).from_config(config, 2, 3, encoding=enc, seed=4, deterministic=True)
    assert not np.array_equal(vjp(other, X, DY)[0], vjp(net, X, DY)[0])


def test_a_network_with_options_a_config_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match=r"MLP.to_config activation: LeakyReLU\(slope=0.2\) has options"):
        sopt.nn.MLP(2, 3, 8, 1, activation={"otype": "LeakyReLU", "slope": 0.2}).to_config()
    with pytest.raises(ValueError, match="FullyFusedMLP fuses only a Frequency encoding, got 'HashGrid'"):
        build("network", {"otype": "FullyFusedMLP"}, 2, 3, encoding=registry.as_config("encoding", {"otype": "HashGrid"}))


@pytest.mark.parametrize("spec,reference", [
    ({"otype": "L2"}, lambda d: np.mean(d**2)),
    ({"otype": "L1"}, lambda d: np.mean(np.abs(d))),
    ({"otype": "Huber", "delta": 0.5}, lambda d: np.mean(np.where(np.abs(d) < 0.5, 0.5 * d**2, 0.5 * (np.abs(d) - 0.25)))),
    ({"otype": "RelativeL2", "epsilon": 0.1}, None),
])
def test_a_loss_round_trips_through_its_config(spec: dict[str, Any], reference: Any) -> None:
    loss = build("loss", spec)
    assert loss.to_config() == registry.as_config("loss", spec)
    rebuilt = type(loss).from_config(loss.to_config())
    pred = np.array([[0.2, -1.0, 0.9], [1.5, 0.1, -0.3]], np.float32)
    target = np.array([[0.0, 0.5, 1.0], [-0.5, 0.1, 0.2]], np.float32)
    values = []
    for fn in (loss, rebuilt):
        p = sopt.nn.batch.as_batch(pred, 3, "test").with_grads(zero=True)
        values.append(fn(p, target).item())
    assert values[0] == values[1]
    d = pred.astype(np.float64) - target
    expected = reference(d) if reference else np.mean(d**2 / (pred.astype(np.float64) ** 2 + 0.1))
    assert values[0] == pytest.approx(expected, rel=1e-5)


# -- simulators ------------------------------------------------------------------------------------------------------
def _projectile() -> tuple[dict[str, Any], tuple]:
    return ({"otype": "Projectile", "dt": 0.01, "gravity": [0.0, -9.5], "drag": 0.25, "linear_drag": 0.5,
             "restitution": 0.75, "ground": -1.0}, (np.array([[0.0, 1.0], [1.0, 2.0]]), np.array([[2.0, 1.0], [-1.0, 0.5]])))


SIMULATORS = [
    _projectile,
    lambda: ({"otype": "SpringSystem", "dt": 1e-3, "stiffness": 50.0, "mass": 0.5, "damping": 0.25,
              "gravity": [0.0, -9.5], "ground": None, "actuation_strength": 1.0},
             (np.array([[0.0, 0.0], [0.5, 0.0], [1.0, 0.25]]), np.array([[0, 1], [1, 2]]))),
    lambda: ({"otype": "Diffusion2D", "conductivity": 2e-4, "dx": 0.02, "dt": 0.25, "boundary": "insulated",
              "boundary_value": 0.0}, (np.random.default_rng(3).uniform(0, 1, (6, 5)),)),
    lambda: ({"otype": "Wave2D", "c": 1.5, "damping": 0.5, "dx": 0.05, "dt": 0.01, "boundary": "dirichlet",
              "boundary_value": 0.25}, (np.random.default_rng(4).uniform(0, 1, (5, 6)),)),
    lambda: ({"otype": "NBody", "dt": 0.01, "G": 1.0, "softening": 0.125},
             (np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.5]]), np.zeros((3, 2)), np.array([1.0, 2.0, 0.5]))),
]


@pytest.mark.parametrize("make", SIMULATORS, ids=["Projectile", "SpringSystem", "Diffusion2D", "Wave2D", "NBody"])
def test_a_simulator_round_trips_through_its_config(make: Any) -> None:
    spec, arrays = make()
    sim = build("simulator", spec, *arrays)
    config = sim.to_config()
    assert config == registry.as_config("simulator", spec)   # the values chosen are exact in float32
    rebuilt = type(sim).from_config(config, *arrays)
    states = []
    for s in (sim, rebuilt):
        state = s.initial_state()
        for _ in range(3):
            state = s.step(state)
        states.append({name: getattr(state, name).to_numpy() for name in s.state_names})
    start = sim.initial_state()
    for name in states[0]:
        assert np.array_equal(states[0][name], states[1][name]), name
    first = sim.state_names[0]   # x or u: three steps moved it
    assert not np.allclose(states[0][first], getattr(start, first).to_numpy(), rtol=0, atol=1e-7)


def test_a_projectile_from_its_config_moves_by_its_coefficients() -> None:
    spec, (x0, v0) = _projectile()
    sim = build("simulator", spec, x0, v0)
    out = sim.step(sim.initial_state())
    g, d, ld, dt = np.array([0.0, -9.5]), 0.25, 0.5, 0.01
    speed = np.linalg.norm(v0, axis=1, keepdims=True)
    v1 = v0 + dt * (g - (ld + d * speed) * v0)          # kick (no contact: both stay above ground -1)
    np.testing.assert_allclose(out.v.to_numpy(), v1, rtol=1e-5)
    np.testing.assert_allclose(out.x.to_numpy(), x0 + dt * v1, rtol=1e-5)


def test_a_simulator_override_replaces_a_config_value_and_per_element_values_are_refused() -> None:
    spec, (x0, v0) = _projectile()
    drag = sopt.Parameter(np.array([0.1, 0.2]), name="drag")
    sim = build("simulator", spec, x0, v0, drag=drag)
    assert sim.parameters() == [drag]
    with pytest.raises(ValueError, match=r"Projectile.to_config: drag has one value per element \(shape \(2,\)\)"):
        sim.to_config()
    shared = build("simulator", spec, x0, v0, drag=sopt.Parameter(np.array([0.375]), name="drag"))
    assert shared.to_config().drag == 0.375   # a shared Parameter's current value

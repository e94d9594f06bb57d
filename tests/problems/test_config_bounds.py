"""Every problem's schema bounds every number, the bounds it documents are the ones enforced, and the memory a config
needs is estimated from its sizes (problems.limits) without building anything. Host-only: no device."""

from __future__ import annotations

import pathlib
import re
import time
import tomllib
import types
import typing
from typing import Any, Iterator

import pytest
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from sopt.config.schema import ConfigError, defaults, merge, validate
from problems import PROBLEMS, problem_class

ROOT = pathlib.Path(__file__).resolve().parents[2]


def numbers(annotation: Any, metadata: list[Any], key: str) -> Iterator[tuple[str, type, list[Any]]]:
    """(dotted key, float or int, its constraints) of every number under ``annotation``: nested models, every
    member of a union (registry components chosen by otype included), list and tuple elements."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        yield from numbers(inner, [*metadata, *extra], key)
    elif origin in (typing.Union, types.UnionType):
        for member in typing.get_args(annotation):
            named = isinstance(member, type) and issubclass(member, BaseModel) and "otype" in member.model_fields
            tag = f"<{member.model_fields['otype'].default}>" if named else ""
            yield from numbers(member, metadata, key + tag)
    elif origin in (list, tuple):
        for element in typing.get_args(annotation):
            if element is not Ellipsis:
                yield from numbers(element, [], f"{key}[]")
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            yield from numbers(field.annotation, list(field.metadata), f"{key}.{name}" if key else name)
    elif annotation in (float, int):
        flat = []
        for item in metadata:   # Annotated[float, Field(ge=...)] carries its bounds inside a FieldInfo
            flat += item.metadata if isinstance(item, FieldInfo) else [item]
        yield key, annotation, flat


ALL_NUMBERS = [(name, key, kind, bounds) for name in PROBLEMS
               for key, kind, bounds in numbers(problem_class(name).schema, [], "")]


def test_the_walk_sees_nested_sections_union_members_and_list_elements():
    keys = {(name, key) for name, key, _, _ in ALL_NUMBERS}
    assert {("nbody_masses", "init.masses[]"), ("heat_inverse", "true.inclusion<Rectangle>.size[]"),
            ("heat_inverse", "sensor_grid[]"), ("fit_projectile", "optimizer<SGD>.momentum"),
            ("neural_field_image", "encoding<HashGrid>.per_level_scale")} <= keys


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_every_number_of_every_problem_has_a_lower_and_an_upper_bound(problem):
    missing = [f"{key} ({kind.__name__}): {'lower' if not any(isinstance(b, (Ge, Gt)) for b in bounds) else 'upper'}"
               for name, key, kind, bounds in ALL_NUMBERS if name == problem
               if not (any(isinstance(b, (Ge, Gt)) for b in bounds) and any(isinstance(b, (Le, Lt)) for b in bounds))]
    assert missing == [], f"{problem}: numbers without both bounds: {missing}"


def load(problem: str, override: dict[str, Any]) -> Any:
    schema = problem_class(problem).schema
    return validate(schema, merge(defaults(schema), override))


def refused(problem: str, override: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load(problem, override)
    assert len(info.value.lines) == 1, info.value.lines
    return info.value.lines[0]


# -- documented bounds are the enforced ones --------------------------------------------------------------------------
def test_nbody_init_masses_documents_and_enforces_the_fit_box():
    from problems.nbody_masses.problem import FIT_BOUNDS, NBodyMassesConfig
    documented = NBodyMassesConfig.model_fields["init"].annotation.model_fields["masses"].description
    assert f"each in [{FIT_BOUNDS[0]}, {FIT_BOUNDS[1]}]" in documented
    assert refused("nbody_masses", {"init": {"masses": [0.01, 1.0, 1.0, 1.0]}}).startswith(
        "config init.masses.0 = 0.01: must be greater than or equal to 0.05")
    assert load("nbody_masses", {"init": {"masses": [0.05, 10.0, 1.0, 1.0]}}).init.masses[1] == 10.0


def test_heat_init_conductivity_starts_at_the_fit_clamp():
    from problems.heat_inverse.problem import FIT_LOW
    assert refused("heat_inverse", {"init": {"conductivity": FIT_LOW / 10}}).startswith(
        "config init.conductivity = 1e-08: must be greater than or equal to")
    assert load("heat_inverse", {"init": {"conductivity": FIT_LOW}}).init.conductivity == FIT_LOW


def test_a_rollout_budget_too_small_for_the_steps_is_refused_by_the_schema():
    for problem, steps in (("fit_cloth", 100), ("heat_inverse", 75)):
        line = refused(problem, {"rollout_budget": 3})
        assert line.startswith(f"config rollout_budget = 3: rollout budget 3 states is too small for {steps} steps"), line
        assert load(problem, {"rollout_budget": 30}).rollout_budget == 30


def test_the_cloth_dt_bound_comes_from_the_keys_and_matches_the_documented_formula():
    from problems.fit_cloth.problem import ClothConfig
    # defaults: k = 1.5 x 250 N/m, c = 1.5 x 0.2 N s/m, m = 0.02 kg: w^2 = 4 k / m, gamma = 4 c / m
    w2, gamma = 4 * 375.0 / 0.02, 4 * 0.3 / 0.02
    limit = 4 / (gamma + (gamma ** 2 + 4 * w2) ** 0.5)
    assert isinstance(load("fit_cloth", {"dt": 0.006, "duration": 0.3, "observations": 10}), ClothConfig)
    assert limit < 0.0075
    with pytest.raises(ConfigError, match=rf"config dt = 0.0075 s is too large.*dt < {limit:.4g} s"):
        load("fit_cloth", {"dt": 0.0075, "duration": 0.3, "observations": 10})


# -- memory estimates ------------------------------------------------------------------------------------------------
def test_the_projectile_estimate_is_its_documented_formula():
    config = load("fit_projectile", {"multi_start": 4096, "observations": 100, "dt": 0.001})
    k, s, o = 4096, 5000, 100
    assert config.memory_estimate() == 4 * (8 * k * (s + 1) + 8 * k * o) + 2 ** 20


@pytest.mark.parametrize("problem,sizes,grows", [
    ("fit_projectile", {"multi_start": 64}, {"multi_start": 128}),
    ("fit_cloth", {"nx": 8}, {"nx": 16}),
    ("heat_inverse", {"grid": 24}, {"grid": 48}),
    ("nbody_masses", {"dt": 0.02}, {"dt": 0.002}),
    ("neural_controller", {"hidden_features": 32}, {"hidden_features": 128}),
    ("neural_field_image", {"image_size": 64}, {"image_size": 256}),
])
def test_an_estimate_grows_with_the_sizes(problem, sizes, grows):
    assert load(problem, grows).memory_estimate() > load(problem, sizes).memory_estimate()


def test_a_rollout_budget_lowers_the_estimate():
    assert (load("heat_inverse", {"rollout_budget": 20}).memory_estimate()
            < load("heat_inverse", {}).memory_estimate())


def test_sizes_that_cannot_fit_are_refused_in_seconds():
    start = time.monotonic()
    line = refused("fit_projectile", {"multi_start": 1_000_000, "dt": 0.001})
    assert time.monotonic() - start < 5
    assert re.match(r"config multi_start = 1000000: the config needs about 1[0-9]{2} GiB \(.*\), more than the "
                    r"[0-9.]+ GiB of (host memory available|memory of the CUDA device)", line), line


def test_the_limit_is_the_smaller_of_host_and_cuda_memory(monkeypatch):
    import problems.limits as limits
    monkeypatch.setattr(limits, "host_memory_available", lambda: 64 * limits.GIB)
    monkeypatch.setattr(limits, "cuda_memory_total", lambda: 16 * limits.GIB)
    assert limits.memory_limit() == (16 * limits.GIB, "memory of the CUDA device")
    monkeypatch.setattr(limits, "cuda_memory_total", lambda: None)
    assert limits.memory_limit() == (64 * limits.GIB, "host memory available")


def test_the_host_memory_is_what_meminfo_says_is_available():
    from sopt.runtime.device import host_memory_available
    meminfo = pathlib.Path("/proc/meminfo")
    if not meminfo.exists():
        pytest.skip("no /proc/meminfo")
    kib = int(re.search(r"^MemAvailable:\s+(\d+) kB", meminfo.read_text(), re.M).group(1))
    assert abs(host_memory_available() - kib * 1024) < 256 * 2 ** 20   # other processes allocate meanwhile


# -- the problems' READMEs ---------------------------------------------------------------------------------------------
def readme_configs() -> list[tuple[str, dict[str, Any]]]:
    """(problem, config) of every ```toml block in the problems' READMEs (configs are shown as sopt config prints
    them; tests/problems/test_readmes.py checks there are no JSON ones)."""
    out = []
    for name in PROBLEMS:
        text = (ROOT / "problems" / name / "README.md").read_text(encoding="utf-8")
        out += [(name, tomllib.loads(block)) for block in re.findall(r"```toml\n(.*?)```", text, re.S)]
    return out


def test_the_gpu_sized_configs_of_the_readmes_validate():
    configs = readme_configs()
    assert {name for name, _ in configs} >= {"fit_projectile", "fit_cloth", "heat_inverse", "nbody_masses",
                                             "neural_controller"}
    for name, config in configs:
        assert load(name, config).memory_estimate() < 4 * 2 ** 30, (name, config)

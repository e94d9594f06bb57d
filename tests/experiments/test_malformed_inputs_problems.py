"""Malformed problem configs through ``sopt run`` (in this process): values that only a problem's physics, sizes or
files rule out are one ``error: config KEY ...`` line naming the dotted key, exit status 2, before the device is
reported, within seconds, and nothing written. Each case passed the schema before, then crashed, hung, allocated
for minutes, ran, or was refused later naming something else than the key (see problems.limits)."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

import problems.limits as limits
from tests.experiments.test_cli import _prepare, listing, sopt_main

FIFO = "a FIFO"   # a file the test makes with os.mkfifo (reading it would block)


def c(problem: str) -> str:
    return f'problem = "{problem}"\n'


# (id, files {name: text | FIFO}, argv after "run" ("{tmp}": the test's folder), what the one error line holds)
CASES: list[tuple[str, dict[str, str], list[str], list[str]]] = [
    # every float key has an upper bound that keeps the problem finite
    ("nbody_noise_1e300", {"c.toml": c("nbody_masses") + "noise_std = 1e300\n"}, ["{tmp}/c.toml"],
     ["config noise_std = 1e+300: must be less than or equal to 1"]),
    ("controller_log_every_huge", {"c.toml": c("neural_controller") + "log_every = 100000000\n"}, ["{tmp}/c.toml"],
     ["config log_every = 100000000: must be less than or equal to 10000000"]),
    ("cloth_rollout_budget_huge", {"c.toml": c("fit_cloth") + "rollout_budget = 100000000\n"}, ["{tmp}/c.toml"],
     ["config rollout_budget = 100000000: must be less than or equal to 10000000"]),
    # the bound sopt config documents is the one enforced, named by its key
    ("nbody_init_mass_below_fit_box", {"c.toml": c("nbody_masses") + "[init]\nmasses = [0.01, 1.0, 1.0, 1.0]\n"},
     ["{tmp}/c.toml"], ["config init.masses.0 = 0.01: must be greater than or equal to 0.05"]),
    ("heat_init_conductivity_below_fit_box", {"c.toml": c("heat_inverse") + "[init]\nconductivity = 1e-8\n"},
     ["{tmp}/c.toml"], ["config init.conductivity = 1e-08: must be greater than or equal to"]),
    ("cloth_rollout_budget_too_small", {"c.toml": c("fit_cloth") + "rollout_budget = 3\n"}, ["{tmp}/c.toml"],
     ["config rollout_budget = 3: rollout budget 3 states is too small for 100 steps; allow at least"]),
    ("heat_rollout_budget_too_small", {"c.toml": c("heat_inverse") + "rollout_budget = 3\n"}, ["{tmp}/c.toml"],
     ["config rollout_budget = 3: rollout budget 3 states is too small for 75 steps; allow at least"]),
    # sizes that cannot fit: refused at once with the estimate and what the machine has
    ("projectile_million_starts", {"c.toml": c("fit_projectile") + "multi_start = 1000000\ndt = 0.001\n"},
     ["{tmp}/c.toml"], ["config multi_start = 1000000: the config needs about", "GiB of"]),
    ("cloth_4096_squared", {"c.toml": c("fit_cloth") + "nx = 4096\nny = 4096\n"}, ["{tmp}/c.toml"],
     ["config nx = 4096: the config needs about", "GiB of"]),
    ("heat_huge_grid", {"c.toml": c("heat_inverse") + "grid = 4096\n"}, ["{tmp}/c.toml"],
     ["config grid = 4096: the config needs about", "GiB of"]),
    ("nbody_billions_of_steps", {"c.toml": c("nbody_masses") + "dt = 1e-8\n"}, ["{tmp}/c.toml"],
     ["config dt = 1e-08: the config needs about", "GiB of"]),
    ("image_huge_and_wide", {"c.toml": c("neural_field_image") + "image_size = 4096\n[network]\nn_neurons = 64\n"
                                                                  "n_hidden_layers = 4\n"}, ["{tmp}/c.toml"],
     ["config image_size = 4096: the config needs about", "GiB of"]),
    ("image_huge_batch", {"c.toml": c("neural_field_image") + "batch_size = 16777216\n"}, ["{tmp}/c.toml"],
     ["config batch_size = 16777216: the config needs about", "GiB of"]),
    # strings that name files
    ("image_name_too_long", {"c.toml": c("neural_field_image") + f'image = "{"x" * 300}.png"\n'}, ["{tmp}/c.toml"],
     ["config image = ", "has a name too long for the filesystem (304 bytes in one name"]),
    ("image_path_too_long", {"c.toml": c("neural_field_image") + f'image = "{"/d" * 2100}.png"\n'}, ["{tmp}/c.toml"],
     ["config image = ", "4204 in the path; at most 255 and 4096)"]),
    ("image_is_a_fifo", {"c.toml": c("neural_field_image") + 'image = "{tmp}/pipe.png"\n', "pipe.png": FIFO},
     ["{tmp}/c.toml"], ["config image = ", "is a FIFO (named pipe), not a regular file"]),
    ("image_is_a_device", {"c.toml": c("neural_field_image") + 'image = "/dev/zero"\n'}, ["{tmp}/c.toml"],
     ["config image = '/dev/zero'", "is a character device, not a regular file"]),
]


def test_there_are_at_least_12_cases():
    assert len(CASES) >= 12 and len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_a_config_the_problem_cannot_run_is_one_line_naming_the_key(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # the sizes cases hold on any machine: one of 16 GiB and no GPU (the H100 machine would take a 45 GiB grid)
    monkeypatch.setattr(limits, "host_memory_available", lambda: 16 * 2 ** 30)
    monkeypatch.setattr(limits, "cuda_memory_total", lambda: None)
    name, files, argv, fragments = case
    texts = {}
    for file, content in files.items():
        if content is FIFO:
            os.mkfifo(tmp_path / file)
        else:
            texts[file] = content.replace("{tmp}", str(tmp_path))
    argv = _prepare((name, texts, argv, fragments), tmp_path)
    before = listing(tmp_path)
    start = time.monotonic()
    code, stdout, stderr = sopt_main(argv)
    assert time.monotonic() - start < 10   # no allocation, no simulation: refused from the keys
    assert code == 2, (stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: config "), stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert stdout == ""   # before the device is reported or a run directory named
    assert listing(tmp_path) == before


def test_a_config_is_refused_when_the_machine_has_less_than_it_needs(tmp_path, monkeypatch):
    """On a machine with 4 MiB free, 256 starts (about 9 MiB) are refused, and the line gives both numbers."""
    monkeypatch.setattr(limits, "host_memory_available", lambda: 4 * 2 ** 20)
    monkeypatch.setattr(limits, "cuda_memory_total", lambda: None)
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = sopt_main(["run", "--problem", "fit_projectile", "multi_start=256",
                                      "--out", str(tmp_path / "out")])
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: config multi_start = 256: the config needs about 0.00") and \
        "more than the 0.00391 GiB of host memory available" in stderr and len(stderr.splitlines()) == 1, stderr
    assert not (tmp_path / "out").exists()

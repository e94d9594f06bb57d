"""``sopt run`` refuses a float that float32 would store as 0, a subnormal or Inf (issue 19, "values mean what they
say in float32"): one ``error:`` line naming the dotted key, exit 2, nothing written, before any GPU work.

Each case passes its key's own bounds (0 < learning_rate <= 10, ...), so before the float32 check it ran (or, for
nbody_masses' unbounded noise_std, crashed after making a run directory); the small fit_projectile scene and
``steps=2`` keep such a run short. The check is test_cli's (its ``sopt_main``, ``_prepare`` and ``listing``).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.experiments import test_cli
from tests.experiments.test_cli import P, SMALL

FIT = ["--problem", "fit_projectile", *SMALL, "steps=2"]
ZERO = "float32 stores it as 0 (subnormal or zero); allowed: 0 or 1.1754944e-38 <="
SUBNORMAL = "float32 stores it as the subnormal"
# (id, files to write, argv after "run" ("{tmp}": the test's folder), what the one error line holds)
FLOAT32_CASES: list[tuple[str, dict[str, Any], list[str], list[str]]] = [
    ("lr_rounds_to_zero", {}, [*FIT, "optimizer.learning_rate=1e-50"],
     ["config optimizer.learning_rate = 1e-50: " + ZERO, "|learning_rate| <= 3.4028235e+38"]),
    ("lr_subnormal", {}, [*FIT, "optimizer.learning_rate=1e-40"],
     ["config optimizer.learning_rate = 1e-40: " + SUBNORMAL]),
    ("adam_epsilon", {}, [*FIT, "optimizer.epsilon=1e-50"], ["config optimizer.epsilon = 1e-50: " + ZERO]),
    ("sgd_momentum", {}, [*FIT, "optimizer.otype=SGD", "optimizer.momentum=1e-40"],
     ["config optimizer.momentum = 1e-40: " + SUBNORMAL]),
    ("adamw_weight_decay", {}, [*FIT, "optimizer.otype=AdamW", "optimizer.weight_decay=1e-45"],
     ["config optimizer.weight_decay = 1e-45: " + SUBNORMAL]),
    ("max_grad_norm", {}, [*FIT, "optimizer.max_grad_norm=1e-50"], ["config optimizer.max_grad_norm = 1e-50: " + ZERO]),
    ("adagrad_initial_accumulator", {}, [*FIT, "optimizer.otype=Adagrad",
                                         "optimizer.initial_accumulator_value=1e-45"],
     ["config optimizer.initial_accumulator_value = 1e-45: " + SUBNORMAL]),
    ("rmsprop_alpha", {}, [*FIT, "optimizer.otype=RMSprop", "optimizer.alpha=1e-40"],
     ["config optimizer.alpha = 1e-40: " + SUBNORMAL]),
    ("schedule_final_lr_factor", {}, [*FIT, "schedule.final_lr_factor=1e-50"],
     ["config schedule.final_lr_factor = 1e-50: " + ZERO]),
    # each factor and the lr are normal floats, their product (the schedule's final lr) is not
    ("schedule_final_lr_below_float32", {}, [*FIT, "optimizer.learning_rate=1e-30", "schedule.final_lr_factor=1e-10"],
     ["config: schedule.final_lr_factor = 1e-10 with optimizer.learning_rate = 1e-30 gives the lr 1e-40: float32 "
      "stores it as the subnormal"]),
    ("schedule_warmup_start_factor", {}, [*FIT, "schedule.warmup_steps=1", "schedule.warmup_start_factor=1e-42"],
     ["config schedule.warmup_start_factor = 1e-42: " + SUBNORMAL]),
    ("exponential_gamma", {}, [*FIT, "schedule.otype=Exponential", "schedule.gamma=1e-50"],
     ["config schedule.gamma = 1e-50: " + ZERO]),
    ("problem_noise_std", {}, [*FIT, "noise_std=1e-45"], ["config noise_std = 1e-45: " + SUBNORMAL]),
    ("toml_file_lr", {"c.toml": P + "[optimizer]\nlearning_rate = 1e-40\n"}, ["{tmp}/c.toml", *SMALL, "steps=2"],
     ["config optimizer.learning_rate = 1e-40: " + SUBNORMAL]),
    ("json_file_smallest_double", {"c.json": '{"problem": "fit_projectile", "optimizer": {"epsilon": 5e-324}}'},
     ["{tmp}/c.json", *SMALL, "steps=2"], ["config optimizer.epsilon = 5e-324: " + ZERO]),
    ("nbody_noise_std_inf", {}, ["--problem", "nbody_masses", "steps=2", "noise_std=1e39"],
     ["config noise_std = 1e+39: "]),   # float32 stores it as inf (or a bound of its own refuses it first)
    ("huber_delta", {}, ["--problem", "neural_field_image", "steps=2", "image_size=16", "loss.otype=Huber",
                         "loss.delta=1e-45"], ["config loss.delta = 1e-45: " + SUBNORMAL]),
]


def test_there_are_at_least_8_float32_cases():
    assert len(FLOAT32_CASES) >= 8 and len({c[0] for c in FLOAT32_CASES}) == len(FLOAT32_CASES)


@pytest.mark.parametrize("case", FLOAT32_CASES, ids=[c[0] for c in FLOAT32_CASES])
def test_a_float_float32_cannot_hold_is_one_line_exit_2_and_writes_nothing(case, tmp_path: pathlib.Path,
                                                                          monkeypatch) -> None:
    # test_cli's check of a malformed case: exit 2, one "error:" line holding each fragment, nothing written
    test_cli.test_a_malformed_config_or_override_is_one_line_exit_2_and_writes_nothing(case, tmp_path, monkeypatch)

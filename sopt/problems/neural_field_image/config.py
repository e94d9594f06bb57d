"""The neural-field-image configuration: a plain dict (or JSON file) in tiny-cuda-nn's style.

Sections ``encoding``, ``network``, ``loss``, ``optimizer``, ``schedule`` each name their kind in ``otype``;
the rest are scalars. A user config is merged over :data:`DEFAULT_CONFIG`: a section that keeps the default
``otype`` (or names none) updates the default's entries, one with another ``otype`` replaces the section.
Every key is checked: an unknown one is a ValueError listing the allowed ones.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
from typing import Any

from sopt.validation import check_bool, check_float, check_int

# Sized for Mesa's software Vulkan driver: a 64x64 image and 800 steps take about 30 s there (plus a few
# seconds compiling the kernels on first use) and reach about 36 dB on the generated image.
DEFAULT_CONFIG: dict[str, Any] = {
    "image_size": 64,                 # the longer side an input image is downscaled to (pixels)
    "encoding": {"otype": "Frequency", "n_frequencies": 6},
    "network": {"otype": "MLP", "activation": "ReLU", "output_activation": "None", "n_neurons": 64,
                "n_hidden_layers": 2},
    "loss": {"otype": "L2"},
    "optimizer": {"otype": "Adam", "learning_rate": 2e-2, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-8,
                  "max_grad_norm": None},
    "schedule": {"otype": "WarmupCosine", "warmup_steps": 20, "final_lr_factor": 0.05},
    "steps": 800,
    "batch_size": 2048,
    "seed": 0,
    "log_every": 25,                  # steps between loss reads (each waits for the GPU)
    "eval_every": 50,                 # steps between full-image PSNR evaluations
    "checkpoint_every": 200,
    "target_psnr": None,              # stop early once the PSNR reaches this (dB)
    "deterministic": False,           # bit-identical runs: fixed-order gradient sums in the layers and hash grid
}

# Allowed keys per section and otype (besides "otype").
SECTION_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "encoding": {"Frequency": ("n_frequencies",),
                 "HashGrid": ("n_levels", "n_features_per_level", "log2_hashmap_size", "base_resolution",
                              "per_level_scale"),
                 "Identity": ()},
    "network": {"MLP": ("activation", "output_activation", "n_neurons", "n_hidden_layers"),
                "FullyFusedMLP": ("activation", "output_activation", "n_neurons", "n_hidden_layers")},
    "loss": {"L2": (), "L1": (), "Huber": ("delta",), "RelativeL2": ("epsilon",)},
    "optimizer": {"Adam": ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay", "max_grad_norm"),
                  "AdamW": ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay", "max_grad_norm"),
                  "SGD": ("learning_rate", "momentum", "nesterov", "weight_decay", "max_grad_norm")},
    "schedule": {"Constant": (), "WarmupCosine": ("warmup_steps", "final_lr_factor"),
                 "Step": ("step_size", "gamma"), "Exponential": ("gamma",)},
}
SCALARS = ("image_size", "steps", "batch_size", "seed", "log_every", "eval_every", "checkpoint_every", "target_psnr",
           "deterministic")


def merge_config(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base`` (neither modified): sections merge unless ``override`` changes the otype."""
    if not isinstance(override, dict):
        raise ValueError(f"a config must be a dict (a JSON object), got {type(override).__name__}")
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if key in SECTION_KEYS:
            if not isinstance(value, dict):
                raise ValueError(f"config section {key!r} must be a dict with an 'otype', got {value!r}")
            same = value.get("otype", merged[key].get("otype")) == merged[key].get("otype")
            merged[key] = {**merged[key], **value} if same else copy.deepcopy(value)
        else:
            merged[key] = value
    return merged


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """ValueError for an unknown key, otype or an out-of-range scalar; returns ``config``."""
    unknown = set(config) - set(SECTION_KEYS) - set(SCALARS)
    if unknown:
        raise ValueError(f"unknown config key(s) {sorted(unknown)}; allowed: {sorted([*SECTION_KEYS, *SCALARS])}")
    for section, kinds in SECTION_KEYS.items():
        entry = config[section]
        otype = entry.get("otype")
        if otype not in kinds:
            raise ValueError(f"config {section}.otype must be one of {sorted(kinds)}, got {otype!r}")
        extra = set(entry) - {"otype", *kinds[otype]}
        if extra:
            raise ValueError(f"config {section} ({otype}) has unknown key(s) {sorted(extra)}; allowed: "
                             f"{sorted(kinds[otype])}")
    for key in ("image_size", "steps", "batch_size", "log_every", "eval_every", "checkpoint_every"):
        check_int(config[key], f"config {key}", low=1)
    check_int(config["seed"], "config seed", low=0)
    check_bool(config["deterministic"], "config deterministic")
    if config["target_psnr"] is not None:
        check_float(config["target_psnr"], "config target_psnr")
    return config


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> dict[str, Any]:
    """The default config, with the JSON file at ``path`` and then ``overrides`` (non-None ones) merged over it."""
    config = copy.deepcopy(DEFAULT_CONFIG)
    if path is not None:
        file = pathlib.Path(path)
        if not file.exists() or file.is_dir():
            raise ValueError(f"config file {str(file)!r} {'is a folder' if file.is_dir() else 'does not exist'}; "
                             "expected a JSON file")
        try:
            user = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"config file {str(file)!r} is not valid JSON: {exc}") from None
        config = merge_config(config, user)
    config = merge_config(config, {k: v for k, v in overrides.items() if v is not None})
    return check_config(config)

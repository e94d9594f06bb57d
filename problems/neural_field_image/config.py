"""The neural-field-image config: a pydantic schema (:class:`NeuralFieldImageConfig`) in tiny-cuda-nn's layout.

Sections ``encoding``, ``network``, ``loss``, ``optimizer`` and ``schedule`` name their kind in ``otype`` and take
any component of that family in :mod:`sopt.config.registry` (encodings Frequency, HashGrid, Identity; networks
MLP, FullyFusedMLP, TensorCoreMLP (CUDA only); losses L2, L1, Huber, RelativeL2; every optimiser and schedule); the
other keys are scalars.
A user config is merged over the defaults (:func:`sopt.config.schema.merge`: a section that keeps its ``otype``
updates the default's entries, one with another ``otype`` replaces the section) and validated: every problem is
one line of a :class:`~sopt.config.schema.ConfigError` naming the dotted key, its value and what is allowed, found
before any GPU work. Besides each key's type and bounds, the schema checks what only the keys together decide:
the sizes the kernels can index (32-bit tensor indices), the widths FullyFusedMLP and TensorCoreMLP take (and
that the latter will run on CUDA), the hash table's size, and that ``image`` names an existing file.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from pydantic import Field, field_validator, model_validator

from sopt.config.registry import union
from sopt.config.schema import defaults
from sopt.experiments.problem import load_config as load_problem_config
from sopt.losses import L2Config
from sopt.nn import FrequencyConfig, MLPConfig
from sopt.optim import AdamConfig
from sopt.optim.lr_scheduler import WarmupCosineConfig
from problems.limits import FLOAT, check_memory, refuse
from problems.neural_field_config import MAX_ELEMENTS, NeuralFieldConfig, deterministic_field
from sopt.utils.regular_file import file_problem

IN_FEATURES, OUT_FEATURES = 2, 3   # (x, y) -> RGB


class NeuralFieldImageConfig(NeuralFieldConfig, problem="neural_field_image"):
    """Fit an RGB image with an encoding + network: pixel-centre coordinates (x, y) in (0, 1)^2 -> colour, trained
    on random batches of pixels. Sized for Mesa's software Vulkan driver: the defaults (a 64x64 image, 800 steps)
    train there in a short run (the README's table has its time and PSNR)."""

    in_features = IN_FEATURES
    out_features = output_floats = OUT_FEATURES

    steps: int = Field(800, ge=1, le=10_000_000, description="optimiser steps")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the weights' initialisation and of the batches")
    log_every: int = Field(25, ge=1, le=10_000_000, description="steps between metrics records (each waits for "
                                                                 "the GPU)")
    checkpoint_every: int = Field(200, ge=1, le=10_000_000, description="steps between checkpoints")
    image: str | None = Field(None, min_length=1, description="PNG/JPEG/... file to fit, downscaled so its longer "
                                                              "side is image_size (None: the generated test image)")
    image_size: int = Field(64, ge=4, le=4096, description="longer side of the fitted image (pixels): the "
                                                           "generated image's size, or the file's downscaled one")
    encoding: union("encoding") = Field(  # type: ignore[valid-type]
        default_factory=lambda: FrequencyConfig(n_frequencies=6), description="input encoding of (x, y)")
    network: union("network") = Field(  # type: ignore[valid-type]
        default_factory=lambda: MLPConfig(n_neurons=64, n_hidden_layers=2, activation="ReLU",
                                          output_activation="None"), description="network from the encoding to RGB")
    loss: union("loss") = Field(default_factory=L2Config,  # type: ignore[valid-type]
                                description="loss between predicted and true colours")
    optimizer: union("optimizer") = Field(  # type: ignore[valid-type]
        default_factory=lambda: AdamConfig(learning_rate=2e-2, beta1=0.9, beta2=0.99, epsilon=1e-8),
        description="optimiser of the encoding's and network's parameters")
    schedule: union("schedule") = Field(  # type: ignore[valid-type]
        default_factory=lambda: WarmupCosineConfig(warmup_steps=20, final_lr_factor=0.05),
        description="learning-rate schedule over the steps")
    batch_size: int = Field(2048, ge=1, le=1 << 24, description="pixels per training step")
    eval_every: int = Field(50, ge=1, le=10_000_000, description="steps between PSNRs of the whole image (and "
                                                                "at the last step)")
    target_psnr: float | None = Field(None, gt=0.0, le=300.0, description="stop once the PSNR reaches this (dB; "
                                                                          "None: run every step)")
    deterministic: bool = deterministic_field()

    @field_validator("image")
    @classmethod
    def _image_file_exists(cls, value: str | None) -> str | None:
        problem = file_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(f"{problem}; expected a PNG/JPEG/... file")
        # absolute, so the resolved config.toml still names the file when the run is resumed from elsewhere
        return str(pathlib.Path(value).resolve()) if value is not None else None

    @model_validator(mode="after")
    def _sizes_the_kernels_take(self) -> "NeuralFieldImageConfig":
        errors = self._network_errors()   # (dotted key, value, message), see limits.refuse
        widest = self._widest()
        if self.image_size ** 2 * widest > MAX_ELEMENTS:
            errors.append((("image_size",), self.image_size,
                           f"evaluating the whole image needs {self.image_size}^2 pixels x {widest} floats, more "
                           f"than {MAX_ELEMENTS} (32-bit tensor indices); lower it or the network's width"))
        if self.batch_size * widest > MAX_ELEMENTS:
            errors.append((("batch_size",), self.batch_size,
                           f"a batch needs {self.batch_size} pixels x {widest} floats, more than {MAX_ELEMENTS} "
                           "(32-bit tensor indices); lower it or the network's width"))
        refuse(self, errors)
        check_memory(self, "batch_size" if 2 * self.batch_size > self.image_size ** 2 else "image_size",
                     self.memory_estimate(),
                     f"{self.image_size}^2 pixels and {self.batch_size} per batch x {self._floats_per_sample()} floats, "
                     f"{self._parameter_count()} parameters x 6")
        return self

    def _floats_per_sample(self) -> int:
        """Floats one pixel takes through the model: coordinates, target, encoding, the network's layers
        (:meth:`_network_floats`), the output."""
        return IN_FEATURES + OUT_FEATURES + self._encoding_width() + self._network_floats() + \
            OUT_FEATURES

    def memory_estimate(self) -> int:
        """Bytes this config needs: the whole image's evaluation (P = image_size^2 pixels) and a batch (B) with
        its gradients, each sample F floats (:meth:`_floats_per_sample`), the parameters with gradient, Adam's two
        moments and the double buffer (6 x W floats), and the image in float64 on the host three times (loaded,
        target, reconstruction): ``4 (P F + 2 B F + 6 W) + 72 P`` plus 1 MiB."""
        f, pixels = self._floats_per_sample(), self.image_size ** 2
        return FLOAT * (pixels * f + 2 * self.batch_size * f + 6 * self._parameter_count()) + 72 * pixels + 2 ** 20


DEFAULT_CONFIG: dict[str, Any] = defaults(NeuralFieldImageConfig)
"""The default config as a plain dict (what ``sopt config neural_field_image`` prints)."""


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> NeuralFieldImageConfig:
    """The defaults, with the TOML or JSON file at ``path`` and then ``overrides`` (top-level keys; None values
    skipped, sections given as dicts) merged over them, validated: ConfigError (one line per problem)."""
    return load_problem_config(NeuralFieldImageConfig, path, {k: v for k, v in overrides.items() if v is not None})

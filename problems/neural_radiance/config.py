"""The neural-radiance config: a pydantic schema (:class:`NeuralRadianceConfig`) in tiny-cuda-nn's layout for the
network's sections (``encoding``, ``network``, ``loss``, ``optimizer``, ``schedule``: any registered component of
the family, by ``otype``), plus the data, the renderer and the occupancy grid. Every number is bounded; what only
the keys together decide (the network's output activation, widths FullyFusedMLP takes, the hash table's size,
32-bit tensor indices, the memory the sizes need) is checked by the validator, one line per problem, before any
GPU work.
"""

from __future__ import annotations

import math
import os
import pathlib
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sopt.config.registry import union
from sopt.config.schema import StrictModel, defaults
from sopt.experiments.problem import load_config as load_problem_config
from sopt.losses import L2Config
from sopt.nn import FullyFusedMLPConfig, HashGridConfig
from sopt.optim import AdamConfig
from sopt.optim.lr_scheduler import WarmupCosineConfig
from problems.limits import FLOAT, check_memory, refuse
from problems.neural_field_config import MAX_ELEMENTS, NeuralFieldConfig, deterministic_field
from sopt.utils.regular_file import name_problem

IN_FEATURES, OUT_FEATURES = 3, 4   # a point in the unit cube -> (density, R, G, B) before their activations
EVAL_SAMPLES = 2**20       # samples per evaluation chunk (rays per chunk: this / samples_per_ray)
BACKGROUNDS = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}


class OccupancyConfig(StrictModel):
    """The occupancy grid that lets the marcher skip empty space (Instant-NGP's density grid, one level)."""

    resolution: int = Field(32, ge=4, le=256, description="cells per side of the grid over the scene box")
    update_every: int = Field(16, ge=1, le=100_000, description="steps between updates (each evaluates the "
                                                               "network at one random point per cell)")
    warmup_steps: int = Field(64, ge=0, le=10_000_000, description="steps before the first update (until then "
                                                                 "every cell is occupied)")
    decay: float = Field(0.95, ge=0.0, le=1.0, description="grid = max(decay * grid, density) at each update")
    min_optical_thickness: float = Field(0.01, gt=0.0, le=10.0, description="a cell is occupied when its density "
                                         "times the march step exceeds this (or exceeds the grid's mean)")


class NeuralRadianceConfig(NeuralFieldConfig, problem="neural_radiance"):
    """Fit a radiance field to posed images: a hash-grid network gives density and colour at points of the scene box
    [-bound, bound]^3, volume rendering along each pixel's ray (with an occupancy grid skipping empty space) gives
    the pixel, trained on random rays of the training views; PSNR and SSIM on held-out views. Without ``data`` the
    built-in scene (coloured spheres and boxes rendered exactly by ray intersection) is fitted; with ``data`` a
    NeRF-synthetic folder (transforms_train.json, transforms_test.json, PNG frames). Sized for Mesa's software
    Vulkan driver: the defaults (48 x 48 views, 1200 steps) reach about 33 dB in about 2 minutes there."""

    in_features = IN_FEATURES
    out_features = output_floats = OUT_FEATURES

    steps: int = Field(1200, ge=1, le=10_000_000, description="optimiser steps")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the weights, the cameras of the built-in scene, "
                                                        "the rays and the occupancy points")
    log_every: int = Field(300, ge=1, le=10_000_000, description="steps between metrics records; each renders the "
                                                               "held-out views for psnr and ssim")
    checkpoint_every: int = Field(600, ge=1, le=10_000_000, description="steps between checkpoints")
    data: str | None = Field(None, min_length=1, description="NeRF-synthetic folder (transforms_train.json, "
                                                             "transforms_test.json, PNG frames); None: the built-in "
                                                             "scene")
    image_size: int = Field(48, ge=8, le=4096, description="pixels per side of the built-in scene's views; a "
                                                           "loaded frame is downscaled to this longer side")
    supersample: int = Field(4, ge=1, le=16, description="the built-in scene's pixels are the mean of supersample x "
                             "supersample rays over their area where an edge may cross them (anti-aliased, as "
                             "rendered images are); 1: one ray through each pixel's centre (aliased edges)")
    pixel_jitter: bool = Field(False, description="each training ray through a uniform random point of its pixel "
                               "(Instant-NGP's); False: through its centre, as the held-out views render (measured "
                               "better against anti-aliased views: see the README)")
    train_views: int = Field(100, ge=1, le=10_000, description="training views: the built-in scene's cameras, or "
                                                              "the first frames of transforms_train.json")
    test_views: int = Field(4, ge=1, le=1_000, description="held-out views (psnr, ssim, pictures): the built-in "
                                                           "scene's, or the first frames of transforms_test.json")
    background: Literal["white", "black"] = Field("white", description="colour behind the scene (frames' alpha is "
                                                                         "composited on it)")
    bound: float = Field(1.0, gt=0.0, le=1000.0, description="half the side of the scene box [-bound, bound]^3 "
                                                             "(world units; NeRF-synthetic scenes: 1.5)")
    rays_per_batch: int = Field(1024, ge=1, le=1 << 22, description="rays per training step")
    samples_per_ray: int = Field(16, ge=1, le=1024, description="samples per ray at most (in occupied cells)")
    march_steps: int = Field(192, ge=8, le=8192, description="march steps across the scene box's diagonal "
                                                             "(step = 2 sqrt(3) bound / march_steps)")
    density_activation: Literal["exp", "softplus"] = Field("exp", description="density from the network's first "
                                                                              "output")
    occupancy: OccupancyConfig = Field(default_factory=OccupancyConfig, description="the occupancy grid")
    encoding: union("encoding") = Field(  # type: ignore[valid-type]
        default_factory=lambda: HashGridConfig(n_levels=8, n_features_per_level=2, log2_hashmap_size=15,
                                               base_resolution=8, per_level_scale=1.5),
        description="encoding of the point (unit-cube coordinates)")
    network: union("network") = Field(  # type: ignore[valid-type]
        default_factory=lambda: FullyFusedMLPConfig(n_neurons=32, n_hidden_layers=1, activation="ReLU",
                                                    output_activation="None"),
        description="network from the encoding to (density, R, G, B) before their activations")
    loss: union("loss") = Field(default_factory=L2Config,  # type: ignore[valid-type]
                                description="loss between rendered and true pixel colours")
    optimizer: union("optimizer") = Field(  # type: ignore[valid-type]
        default_factory=lambda: AdamConfig(learning_rate=1e-2, beta1=0.9, beta2=0.99, epsilon=1e-15),
        description="optimiser of the encoding's and network's parameters")
    schedule: union("schedule") = Field(  # type: ignore[valid-type]
        default_factory=lambda: WarmupCosineConfig(warmup_steps=50, final_lr_factor=0.1),
        description="learning-rate schedule over the steps")
    target_psnr: float | None = Field(None, gt=0.0, le=300.0, description="stop once the held-out PSNR reaches "
                                                                          "this (dB; None: run every step)")
    deterministic: bool = deterministic_field()

    @field_validator("data")
    @classmethod
    def _data_folder(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = name_problem(value)
        if problem is None and not pathlib.Path(value).is_dir():
            problem = "does not exist" if not pathlib.Path(value).exists() else "is not a folder"
        if problem is None and not (pathlib.Path(value) / "transforms_train.json").is_file():
            problem = "has no transforms_train.json"
        if problem is not None:
            raise ValueError(f"{problem}; expected a NeRF-synthetic folder (transforms_train.json, "
                             "transforms_test.json and their PNG frames)")
        # absolute, so the resolved config.toml still names the folder when the run is resumed from elsewhere
        return str(pathlib.Path(value).resolve())

    @property
    def dt(self) -> float:
        """The march step (world units)."""
        return 2.0 * math.sqrt(3.0) * self.bound / self.march_steps

    @property
    def background_rgb(self) -> tuple[float, float, float]:
        return BACKGROUNDS[self.background]

    @property
    def eval_rays(self) -> int:
        """Rays per evaluation chunk."""
        return max(1, EVAL_SAMPLES // self.samples_per_ray)

    @model_validator(mode="after")
    def _sizes_the_kernels_take(self) -> "NeuralRadianceConfig":
        errors: list[tuple[tuple[str, ...], Any, str]] = []   # (dotted key, value, message), see limits.refuse
        if self.network.output_activation != "None":
            errors.append((("network", "output_activation"), self.network.output_activation,
                           "must be 'None': the renderer applies the density activation and the colour's sigmoid"))
        errors += self._network_errors()
        widest = self._widest()
        samples = self.rays_per_batch * self.samples_per_ray
        if samples * widest > MAX_ELEMENTS:
            errors.append((("rays_per_batch",), self.rays_per_batch,
                           f"a batch of {self.rays_per_batch} rays x {self.samples_per_ray} samples x {widest} floats "
                           f"is more than {MAX_ELEMENTS} (32-bit tensor indices); lower it or samples_per_ray"))
        if self.occupancy.resolution ** 3 * widest > MAX_ELEMENTS:
            errors.append((("occupancy", "resolution"), self.occupancy.resolution,
                           f"an update evaluates {self.occupancy.resolution}^3 points x {widest} floats, more than "
                           f"{MAX_ELEMENTS} (32-bit tensor indices); lower it"))
        if self.data is None and self.image_size ** 2 * 3 * self.train_views > MAX_ELEMENTS:
            errors.append((("image_size",), self.image_size,
                           f"{self.train_views} views of {self.image_size}^2 pixels x 3 floats are more than "
                           f"{MAX_ELEMENTS} (32-bit tensor indices); lower it or train_views"))
        refuse(self, errors)
        if self.data is not None:   # the transforms files, cameras and frame sizes, before any pixel is decoded
            from problems.neural_radiance.nerf_synthetic import check_data
            try:
                check_data(self.data, {"train": self.train_views, "test": self.test_views})
            except ValueError as exc:
                refuse(self, [(("data",), self.data, str(exc))])
        check_memory(self, "rays_per_batch", self.memory_estimate(),
                     f"{self.train_views + self.test_views} views of {self.image_size}^2 pixels, "
                     f"{self.rays_per_batch} x {self.samples_per_ray} samples x {self._floats_per_sample()} floats, "
                     f"{self._parameter_count()} parameters x 6")
        return self

    def _floats_per_sample(self) -> int:
        """Floats one sample takes through a step: point, delta, depth, encoding, the network's layers
        (:meth:`_network_floats`), the raw output and its gradient."""
        return IN_FEATURES + 2 + self._encoding_width() + self._network_floats() + 2 * OUT_FEATURES

    def memory_estimate(self) -> int:
        """Bytes this config needs: the views (V = train_views + test_views of P = image_size^2 pixels) on the host in
        float64 and float32 and on the device (3 floats a pixel: 60 V P bytes), a training batch and an evaluation
        chunk of samples (S = rays_per_batch x samples_per_ray, and E = min(2^20, image_size^2 x samples_per_ray)) of F floats each with their gradients
        (:meth:`_floats_per_sample`), an occupancy update (G = resolution^3 points, F floats each, and the grid),
        the parameters with gradient, Adam's two moments and the double buffer (6 x W floats):
        ``60 V P + 4 (2 S F + E F + G (F + 2) + 6 W)`` plus 16 MiB."""
        f = self._floats_per_sample()
        views = (self.train_views + self.test_views) * self.image_size ** 2
        samples = self.rays_per_batch * self.samples_per_ray
        grid = self.occupancy.resolution ** 3
        chunk = min(EVAL_SAMPLES, self.image_size ** 2 * self.samples_per_ray)
        return 60 * views + FLOAT * (2 * samples * f + chunk * f + grid * (f + 2) +
                                     6 * self._parameter_count()) + 16 * 2**20


DEFAULT_CONFIG: dict[str, Any] = defaults(NeuralRadianceConfig)
"""The default config as a plain dict (what ``sopt config neural_radiance`` prints)."""


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> NeuralRadianceConfig:
    """The defaults, with the TOML or JSON file at ``path`` and then ``overrides`` (top-level keys; None values
    skipped, sections given as dicts) merged over them, validated: ConfigError (one line per problem)."""
    return load_problem_config(NeuralRadianceConfig, path, {k: v for k, v in overrides.items() if v is not None})

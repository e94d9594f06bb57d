"""Compositor: volume rendering of marched samples into pixel colours, depth and opacity, with its hand-written
backward (composite.slang states the equations), recorded on the tape."""

from __future__ import annotations

import pathlib
from typing import Literal

import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, launch

_FOLDER = pathlib.Path(__file__).resolve().parent
_COMPOSITE_FORWARD = Function(_FOLDER / "composite.slang", "composite_forward")
_COMPOSITE_BACKWARD = Function(_FOLDER / "composite.slang", "composite_backward")

DENSITY_ACTIVATIONS = {"exp": 0, "softplus": 1}   # density.slang's codes
MIN_TRANSMITTANCE = 1e-4   # a ray stops once this little light gets through (Instant-NGP's)


class Compositor:
    """``compositor(raw, deltas, depths)`` -> (rgb (R, 3), depth (R, 1), opacity (R, 1)) from the network's raw
    outputs ``raw`` (R S, 4) (density before its activation, then RGB before the sigmoid) at the samples the
    marcher wrote (``deltas``, ``depths``: (R S, 1)), S = ``samples``. On a tape, the backward writes dL/draw from
    dL/drgb (depth and opacity are not differentiated)."""

    def __init__(self, samples: int, density_activation: Literal["exp", "softplus"],
                 background: tuple[float, float, float], min_transmittance: float = MIN_TRANSMITTANCE) -> None:
        if density_activation not in DENSITY_ACTIVATIONS:
            raise ValueError(f"Compositor density_activation {density_activation!r}: allowed "
                             f"{sorted(DENSITY_ACTIVATIONS)}")
        self.samples = int(samples)
        self.args = {"samples": self.samples, "activation": DENSITY_ACTIVATIONS[density_activation],
                     "background": spy.float3(*(float(c) for c in background)),
                     "min_transmittance": float(min_transmittance)}

    def __call__(self, raw: spy.Tensor, deltas: spy.Tensor, depths: spy.Tensor
                 ) -> tuple[spy.Tensor, spy.Tensor, spy.Tensor]:
        n_samples = int(raw.shape[0])
        if tuple(raw.shape) != (n_samples, 4) or n_samples % self.samples:
            raise ValueError(f"Compositor: raw must have shape (R * {self.samples}, 4), got {tuple(raw.shape)}")
        n = n_samples // self.samples
        rgb = tp.new_tensor((n, 3), grads=True)
        depth, opacity = tp.new_tensor((n, 1), grads=False), tp.new_tensor((n, 1), grads=False)
        grid = spy.grid((n,))

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_COMPOSITE_FORWARD, enc, r=grid, c=self.args, raw=tp.flat(raw), deltas=tp.flat(deltas),
                   depths=tp.flat(depths), rgb=tp.flat(rgb), depth=tp.flat(depth), opacity=tp.flat(opacity))

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            target = redirect[0]
            if target.grad_out is None:
                return
            launch(_COMPOSITE_BACKWARD, enc, r=grid, c=self.args, raw=tp.flat(raw), deltas=tp.flat(deltas),
                   rgb=tp.flat(rgb), rgb_grad=tp.flat(rgb.grad), raw_grad=tp.flat(target.grad))

        tp.record("Compositor", forward, backward, reads=[raw, deltas], writes=[rgb, depth, opacity],
                  write_grads=[raw])
        return rgb, depth, opacity

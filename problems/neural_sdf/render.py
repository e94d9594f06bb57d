"""SphereTracer: a shaded picture of a learned signed distance field, sphere-traced on the GPU (neural_sdf.slang's
trace_begin / trace_step / normal_probes / shade, the network evaluated by its own forward between steps)."""

from __future__ import annotations

import math

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.nn.module import Module
from problems.neural_sdf import kernels


def look_at_camera(width: int, height: int, azimuth_deg: float = 35.0, elevation_deg: float = 30.0,
                   distance: float = 1.35, fov_deg: float = 40.0) -> dict[str, object]:
    """The ``Camera`` struct of neural_sdf.slang for an eye ``distance`` from the box centre (0.5, 0.5, 0.5) at the
    given azimuth (about z, from +x) and elevation, looking at the centre with z up; ``fov_deg`` vertical."""
    az, el = math.radians(azimuth_deg), math.radians(elevation_deg)
    centre = np.array([0.5, 0.5, 0.5])
    eye = centre + distance * np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
    forward = (centre - eye) / np.linalg.norm(centre - eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    half = math.tan(math.radians(fov_deg) / 2.0)
    as_f3 = lambda v: spy.float3(*(float(x) for x in v))   # noqa: E731
    return {"eye": as_f3(eye), "forward": as_f3(forward), "right": as_f3(right * half * width / height),
            "up": as_f3(up * half), "width": width, "height": height}


class SphereTracer:
    """Renders ``model`` (points (N, 3) in the unit box -> signed distance in column 0) as a ``width`` x ``height``
    RGB picture: each pixel's ray marches from where it enters the box by ``step_scale`` times the field's value
    until ``|sdf| < hit_epsilon`` (a hit) or it leaves the box, for at most ``max_steps`` evaluations; hits are
    shaded with the central-difference normal (spacing ``normal_h``), misses are white."""

    def __init__(self, width: int, height: int, max_steps: int = 96, step_scale: float = 0.9,
                 hit_epsilon: float = 1e-3, normal_h: float = 1e-3) -> None:
        self.width, self.height, self.max_steps = width, height, max_steps
        self.camera = look_at_camera(width, height)
        self.step_scale, self.hit_epsilon, self.normal_h = step_scale, hit_epsilon, normal_h
        n = width * height
        device = dev.get_device()
        self.t = spy.Tensor.empty(device, (n,), "float")
        self.state = spy.Tensor.empty(device, (n,), "uint")
        self.points = spy.Tensor.empty(device, (n, 3), "float")
        self.probes = spy.Tensor.empty(device, (6 * n, 3), "float")
        self.rgb = spy.Tensor.empty(device, (n, 3), "float")

    def _trace_args(self, out: spy.Tensor) -> dict[str, object]:
        return {"n_rays": self.width * self.height, "out_stride": int(out.shape[1]), "out_offset": int(out.offset),
                "step_scale": float(self.step_scale), "hit_epsilon": float(self.hit_epsilon)}

    def render(self, model: Module) -> np.ndarray:
        """(height, width, 3) float32 RGB in [0, 1] of ``model``'s zero level set (waits for the GPU)."""
        n = self.width * self.height
        buffers = {"t": self.t.storage, "state": self.state.storage, "points": self.points.storage}
        kernels.TRACE_BEGIN.bind(cam=self.camera, n_rays=n, **buffers).dispatch(n)
        step = kernels.TRACE_STEP.bind(cam=self.camera, **buffers)
        for _ in range(self.max_steps):
            out = model.forward(self.points)
            step.set(args=self._trace_args(out), sdf=out.storage).dispatch(n)
        kernels.NORMAL_PROBES.bind(n_rays=n, h=float(self.normal_h), points=self.points.storage,
                      probes=self.probes.storage).dispatch(6 * n)
        out = model.forward(self.probes)
        kernels.SHADE.bind(cam=self.camera, args=self._trace_args(out), probe_sdf=out.storage,
                      state=self.state.storage, rgb=self.rgb.storage).dispatch(n)
        return self.rgb.to_numpy().reshape(self.height, self.width, 3)

    def hits(self) -> np.ndarray:
        """(height, width) bool: the pixels whose ray hit the surface in the last :meth:`render`."""
        return self.state.to_numpy().reshape(self.height, self.width) == 1

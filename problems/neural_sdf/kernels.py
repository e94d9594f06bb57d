"""The compute kernels of neural_sdf.slang (the mesh's signed distance, the training points, sphere tracing),
declared once (sopt.runtime.kernel); each is loaded at its first use and bound to its arguments by name."""

from __future__ import annotations

import pathlib

from sopt.runtime.kernel import Kernel

SOURCE = pathlib.Path(__file__).with_name("neural_sdf.slang")
SIGNED_DISTANCE = Kernel(SOURCE, "signed_distance")
SAMPLE_POINTS = Kernel(SOURCE, "sample_points")
TRACE_BEGIN = Kernel(SOURCE, "trace_begin")
TRACE_STEP = Kernel(SOURCE, "trace_step")
NORMAL_PROBES = Kernel(SOURCE, "normal_probes")
SHADE = Kernel(SOURCE, "shade")

"""GridBarrier: the host side of sim/grid_barrier.slang, the barrier across the thread groups of one dispatch
that lets a kernel loop over simulation steps itself (SpringSystem.steps, Diffusion2D.steps on CUDA).

The kernel's groups spin on a device-wide counter, so all of them must be resident at once: :func:`max_groups`
is one group per multiprocessor of the CUDA device (None on Vulkan, where only one group is launched: a
software driver may run groups one after another, and the first would wait forever). The counter must be 0
when a dispatch starts: :meth:`SteppingDispatch.dispatch` records that before each dispatch of more than one
group.
"""

from __future__ import annotations

from typing import Any

import slangpy as spy

from sopt import device as dev

_kernels: dict[str, spy.ComputeKernel] = {}


def stepping_kernel(module: str, name: str, call: str, threads: int) -> spy.ComputeKernel:
    """The compute kernel ``name``: groups of ``threads`` threads, each calling ``call(lane, group)``, a function
    of the Slang module ``module`` (e.g. ``sim/spring_system_steps``, ``spring_steps_forward<3, 64, 0>``) that
    loops over the steps and synchronises with ``grid_sync``. Compiled once per process (and cached on disk)."""
    kernel = _kernels.get(name)
    if kernel is None:
        source = (f'import {module.replace("/", ".")};\n[shader("compute")]\n[numthreads({threads}, 1, 1)]\n'
                  f"void {name}(uint lane: SV_GroupIndex, uint3 group: SV_GroupID) {{ "
                  f"{call}(int(lane), int(group.x)); }}\n")
        device = dev.get_device()
        with dev.compiling(f"{module}.slang:{name}"):
            loaded = device.load_module_from_source(name, source)
            program = device.link_program([loaded], [loaded.entry_point(name)])
            kernel = _kernels[name] = device.create_compute_kernel(program)
    return kernel


def max_groups() -> int | None:
    """The most thread groups a grid-barrier kernel may launch here, or None where only one may (Vulkan)."""
    count = dev.multiprocessor_count()
    return count if count is not None and count >= 2 else None


class SteppingDispatch:
    """One simulator's stepping kernels, bound, and their grid barrier's arrival counter (4 bytes).

    Each kernel takes its scalars as one uniform struct ``struct`` (the fields ``fields``, among them
    ``groups``), the counter as the ``RWStructuredBuffer<uint>`` named ``barrier``, and ``constant`` bindings
    (set once) besides the per-dispatch buffers."""

    def __init__(self, struct: str, fields: tuple[str, ...], barrier: str, **constant: Any) -> None:
        self.struct, self.fields = struct, fields
        self.counter = dev.get_device().create_buffer(
            size=4, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
            | spy.BufferUsage.copy_destination)
        self._constant = {barrier: self.counter, **constant}
        self._bound: dict[int, dev.BoundKernel] = {}

    def dispatch(self, kernel: spy.ComputeKernel, encoder: spy.CommandEncoder, threads: int, groups: int,
                 args: dict[str, Any], buffers: dict[str, Any]) -> None:
        """Record ``kernel`` on ``groups`` groups of ``threads`` threads with the struct's fields from ``args``
        (those missing 0) and ``buffers``; first the counter's reset, which several groups need."""
        bound = self._bound.get(id(kernel))
        if bound is None:
            bound = self._bound[id(kernel)] = dev.BoundKernel(kernel, **self._constant)
        if groups > 1:
            encoder.clear_buffer(self.counter)
        values = {**args, "groups": groups}
        bound.set(**{self.struct: {name: values.get(name, 0) for name in self.fields}}, **buffers)
        bound.dispatch(threads * groups, encoder)

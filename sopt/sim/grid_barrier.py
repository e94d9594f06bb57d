"""The host side of sim/grid_barrier.slang, the barrier across the thread groups of one dispatch that lets a
kernel loop over simulation steps itself (SpringSystem.steps, Diffusion2D.steps on CUDA).

The kernel's groups spin on a device-wide counter, so all of them must be resident at once: :func:`max_groups`
is one group per multiprocessor of the CUDA device (None on Vulkan, where only one group is launched: a
software driver may run groups one after another, and the first would wait forever). The counter must be 0
when a dispatch starts: :meth:`BarrierCounter.reset` records that before each dispatch of more than one group.

The stepping kernels are generic ``[shader("compute")]`` entry points of their Slang files (``[numthreads(T, 1,
1)]`` with T a generic argument), declared as :class:`sopt.runtime.kernel.Kernel` s and specialised by their generic
arguments: ``Kernel("sim/diffusion2d_grid_steps", "diffusion2d_grid_forward_kernel").specialise(512, 8)``.
"""

from __future__ import annotations

from typing import Any

import slangpy as spy

from sopt.runtime import device as dev
from sopt.runtime.kernel import Kernel, dummy_buffer


def max_groups() -> int | None:
    """The most thread groups a grid-barrier kernel may launch here, or None where only one may (Vulkan)."""
    count = dev.multiprocessor_count()
    return count if count is not None and count >= 2 else None


class BarrierCounter:
    """A grid barrier's arrival counter (4 bytes; the kernels' ``RWStructuredBuffer<uint>``)."""

    def __init__(self) -> None:
        self.buffer = dev.get_device().create_buffer(
            size=4, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
            | spy.BufferUsage.copy_destination)

    def reset(self, encoder: spy.CommandEncoder, groups: int) -> None:
        """Record the counter's reset before a dispatch of ``groups`` groups (one group does not use it)."""
        if groups > 1:
            encoder.clear_buffer(self.buffer)


class SteppingDispatch:
    """One simulator's stepping kernels, bound, and their grid barrier's arrival counter.

    Each kernel takes one entry-point struct parameter ``param`` (issue 20: named arguments, not module globals;
    ``uniform SpringSteps call``), whose members are the struct ``struct`` of scalars (the fields ``fields``, among
    them ``groups``), the counter as the ``RWStructuredBuffer<uint>`` named ``barrier``, ``constant`` bindings (set
    once) and the per-dispatch buffers ``buffers`` (those a dispatch leaves out bound to a dummy buffer). A dispatch
    writes only the members that changed (:meth:`sopt.runtime.device.BoundKernel.set_members`)."""

    def __init__(self, struct: str, fields: tuple[str, ...], barrier: str, param: str, buffers: tuple[str, ...],
                 **constant: Any) -> None:
        self.counter = BarrierCounter()
        self._constant = {barrier: self.counter.buffer, **constant}
        self.struct, self.fields, self.param = struct, fields, param
        self.buffers = tuple(name for name in buffers if name not in self._constant)   # set per dispatch
        self._bound: dict[Kernel, dev.BoundKernel] = {}
        self._unset: dict[str, Any] | None = None   # every per-dispatch buffer bound to the dummy buffer

    def dispatch(self, kernel: Kernel, encoder: spy.CommandEncoder, threads: int, groups: int,
                 args: dict[str, Any], buffers: dict[str, Any]) -> None:
        """Record ``kernel`` (a generic entry point specialised to groups of ``threads``) on ``groups`` groups with
        the struct's fields from ``args`` (those missing 0) and ``buffers`` (those missing a dummy buffer; an
        unknown name is a KeyError before anything is written); first the counter's reset."""
        if self._unset is None:
            self._unset = {name: dummy_buffer() for name in self.buffers}
        bound = self._bound.get(kernel)
        if bound is None:
            bound = self._bound[kernel] = kernel.bind(**{self.param: {
                self.struct: {name: 0 for name in self.fields}, **self._constant, **self._unset}})
        values = {**args, "groups": groups}
        bound.set_members(self.param, **{self.struct: {name: values.get(name, 0) for name in self.fields}},
                          **{**self._unset, **buffers})
        self.counter.reset(encoder, groups)
        bound.dispatch(threads * groups, encoder)

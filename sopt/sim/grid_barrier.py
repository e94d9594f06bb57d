"""The host side of sim/grid_barrier.slang, the barrier across the thread groups of one dispatch that lets a
kernel loop over simulation steps itself (SpringSystem.steps, Diffusion2D.steps on CUDA).

The kernel's groups spin on a device-wide counter, so all of them must be resident at once: :func:`max_groups`
is one group per multiprocessor of the CUDA device (None on Vulkan, where only one group is launched: a
software driver may run groups one after another, and the first would wait forever). The counter must be 0
when a dispatch starts: :meth:`BarrierCounter.reset` records that before each dispatch of more than one group.

The stepping kernels are generic ``[shader("compute")]`` entry points of their Slang files (``[numthreads(T, 1,
1)]`` with T a generic argument), declared as :class:`sopt.kernel.Kernel` s and specialised by their generic
arguments: ``Kernel("sim/diffusion2d_grid_steps", "diffusion2d_grid_forward_kernel").specialise(512, 8)``.
"""

from __future__ import annotations

from typing import Any

import slangpy as spy

from sopt import device as dev
from sopt.kernel import Kernel, dummy_buffer


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

    Each kernel takes its scalars as one struct ``struct`` (the fields ``fields``, among them ``groups``), the
    counter as the ``RWStructuredBuffer<uint>`` named ``barrier``, and ``constant`` bindings (set once) besides
    the per-dispatch buffers. With ``param`` (issue 20: named arguments, not module globals) all of these are
    the members of one entry-point struct parameter of that name (``uniform SpringSteps call``: call.steps_args,
    call.steps_saved, ...), its buffer members ``buffers`` (those a dispatch leaves out bound to a dummy buffer),
    written member by member, only those that changed, through a cursor per member; without it they are
    module-level shader parameters."""

    def __init__(self, struct: str, fields: tuple[str, ...], barrier: str, param: str | None = None,
                 buffers: tuple[str, ...] = (), **constant: Any) -> None:
        self.counter = BarrierCounter()
        self._constant = {barrier: self.counter.buffer, **constant}
        self.struct, self.fields, self.param = struct, fields, param
        self.buffers = tuple(name for name in buffers if name not in self._constant)   # set per dispatch
        self._bound: dict[Kernel, dev.BoundKernel] = {}
        # param: per kernel, the members last written and their cursors
        self._written: dict[Kernel, dict[str, Any]] = {}
        self._cursors: dict[Kernel, dict[str, spy.ShaderCursor]] = {}

    def _bind(self, kernel: Kernel) -> dev.BoundKernel:
        if self.param is None:
            return kernel.bind(**self._constant)
        members: dict[str, Any] = {name: dummy_buffer() for name in self.buffers}
        members.update(self._constant)
        members[self.struct] = {name: 0 for name in self.fields}
        bound = kernel.bind(**{self.param: members})
        written = {name: value for name, value in members.items() if name != self.struct}
        written.update(members[self.struct])
        self._written[kernel], self._cursors[kernel] = written, {}
        return bound

    def dispatch(self, kernel: Kernel, encoder: spy.CommandEncoder, threads: int, groups: int,
                 args: dict[str, Any], buffers: dict[str, Any]) -> None:
        """Record ``kernel`` (a generic entry point specialised to groups of ``threads``) on ``groups`` groups with
        the struct's fields from ``args`` (those missing 0) and ``buffers``; first the counter's reset."""
        bound = self._bound.get(kernel)
        if bound is None:
            bound = self._bound[kernel] = self._bind(kernel)
        self.counter.reset(encoder, groups)
        values = {**args, "groups": groups}
        if self.param is None:
            bound.set(**{self.struct: {name: values.get(name, 0) for name in self.fields}}, **buffers)
        else:
            self._write(kernel, bound, values, buffers)
        bound.dispatch(threads * groups, encoder)

    def _write(self, kernel: Kernel, bound: dev.BoundKernel, values: dict[str, Any], buffers: dict[str, Any]
               ) -> None:
        """Write the members of ``param`` that differ from the last written: the fields (missing: 0), then the
        buffers (missing: a dummy buffer; unknown names raise KeyError)."""
        written, cursors = self._written[kernel], self._cursors[kernel]
        unknown = buffers.keys() - written.keys()
        if unknown:
            raise KeyError(f"{self.param} has no buffer member(s) {sorted(unknown)}")
        wanted = {name: values.get(name, 0) for name in self.fields}
        wanted.update({name: buffers[name] if name in buffers else dummy_buffer() for name in self.buffers})
        for name, value in wanted.items():
            old = written[name]
            if old is value or (isinstance(value, (int, float)) and type(old) is type(value) and old == value):
                continue
            cursor = cursors.get(name)
            if cursor is None:
                member = bound._field(self.param, self.struct)[name] if name in self.fields else \
                    bound._field(self.param, name)
                cursor = cursors[name] = member
            cursor.write(value)
            written[name] = value

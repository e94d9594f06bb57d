"""GridBarrier: the host side of sim/grid_barrier.slang, the barrier across the thread groups of one dispatch
that lets a kernel loop over simulation steps itself (SpringSystem.steps, Diffusion2D.steps on CUDA).

The kernel's groups spin on a device-wide counter, so all of them must be resident at once: :func:`max_groups`
is one group per multiprocessor of the CUDA device (None on Vulkan, where only one group is launched: a
software driver may run groups one after another, and the first would wait forever). The counter must be 0
when a dispatch starts: :meth:`GridBarrier.clear` records that before each dispatch of more than one group.
"""

from __future__ import annotations

import slangpy as spy

from sopt import device as dev


def max_groups() -> int | None:
    """The most thread groups a grid-barrier kernel may launch here, or None where only one may (Vulkan)."""
    count = dev.multiprocessor_count()
    return count if count is not None and count >= 2 else None


class GridBarrier:
    """The arrival counter of one kernel's grid barrier (4 bytes), bound as ``RWStructuredBuffer<uint>``."""

    def __init__(self) -> None:
        self.buffer = dev.get_device().create_buffer(
            size=4, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
            | spy.BufferUsage.copy_destination)

    def clear(self, encoder: spy.CommandEncoder, groups: int) -> None:
        """Record the counter's reset before a dispatch of ``groups`` groups (none needed for one group)."""
        if groups > 1:
            encoder.clear_buffer(self.buffer)

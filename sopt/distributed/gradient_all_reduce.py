"""GradientAllReduce: the mean of every rank's flat gradient buffer, between the backward and the optimiser step.

An optimiser keeps all its parameters' gradients in one block of its arena (:mod:`sopt.optim.arena`): ``n``
float32 values at the start of one GPU buffer. After the backward each rank holds the gradient of the mean loss
over its part of the batch, ``g_r``; one collective replaces it, on every rank, by

    g = (g_0 + g_1 + ... + g_{W-1}) / W

which, the parts being the same size, is the gradient of the mean loss over the whole batch. Every rank then
takes the same optimiser step on the same gradient, so the parameters stay identical on all ranks.

Two paths, by device:

- **CUDA** (NCCL): the device shares torch's CUDA context (:mod:`sopt.runtime.device`), so a zero-copy torch view
  of the gradient block (through ``sopt.runtime.cuda_array.buffer_view``, on the GPU that holds it) goes straight to ``torch.distributed.all_reduce`` (AVG). sopt
  submits on torch's current stream and NCCL waits for that stream, so the step's commands so far (forward,
  backward) are submitted, the all-reduce is queued behind them, and the optimiser step's commands, submitted
  next on the same stream, run after it: the host never waits for the GPU.
- **Vulkan** (gloo): the step's commands so far are submitted and waited for, the gradient block is read to the
  host, all-reduced by gloo on a CPU tensor, and uploaded again at the start of the optimiser step's commands.

One all-reduce of the whole buffer, no buckets and no overlap with the backward: in the networks sopt trains the
largest gradient by far is the encoding's (a hash grid's table), and it is the *last* the backward computes (the
encoding is the first layer), so a bucket sent while the backward runs would carry little of the buffer.

Determinism: a ring all-reduce over a fixed world size and buffer size adds in a fixed order, so runs repeat; with
``deterministic=True`` the ranks' buffers are instead all-gathered and summed in rank order (``((g_0 + g_1) + g_2)
+ ...``), an order that depends on nothing but the world size. With 2 (or any power-of-two) ranks and a loss that
is a mean, each ``g_r`` is exactly ``W`` times the sum of its rows' contributions, so where the layers' own sums
match too (sopt.nn.Linear with each rank's part one chunk of 512 rows) the result equals one process's gradient bit
for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.runtime.cuda_array import buffer_view


class GradientAllReduce:
    """Replaces the gradient block of an optimiser's arena by its mean over the ``world_size`` ranks of
    ``group`` (see the module docstring). ``on_gpu``: the NCCL path on a device sharing torch's CUDA context;
    else the gloo path through host memory."""

    def __init__(self, world_size: int, *, deterministic: bool, on_gpu: bool, group: Any = None) -> None:
        import torch
        import torch.distributed as dist
        self._torch, self._dist = torch, dist
        self.world_size, self.deterministic, self.on_gpu, self.group = world_size, deterministic, on_gpu, group
        self._view: tuple[spy.Buffer, Any] | None = None   # (arena buffer, its torch view): rebuilt when it moves
        self.calls = 0

    def __call__(self, tape: Any, optimizer: Any) -> None:
        """Submit ``tape``'s commands so far (forward and backward), average the gradients of ``optimizer``'s arena
        over the ranks, and give ``tape`` a fresh encoder for the optimiser step (which its ``submit`` sends)."""
        arena = getattr(optimizer, "arena", None)
        if arena is None:
            raise ValueError(f"data-parallel training averages the gradients of a sopt optimiser's arena; "
                             f"{type(optimizer).__name__} has none")
        # gradient terms a module left pending (a float16 hash grid's sums: sopt.autodiff.grad_source) are not in the
        # block yet: converted first, so that they are averaged too
        optimizer.flush_pending(tape.encoder)
        dev.submit(tape.encoder)
        if self.on_gpu:
            self._reduce_on_gpu(self._gradient_view(arena))
            tape.encoder = dev.create_command_encoder()
        else:
            dev.synchronize()
            reduced = self._reduce_on_host(arena.grads.to_numpy().astype(np.float32, copy=False))
            tape.encoder = dev.create_command_encoder()
            tape.encoder.upload_buffer_data(arena.buffer, 0, reduced)   # the gradient block starts the buffer
        self.calls += 1

    # -- CUDA: NCCL on the arena's memory -------------------------------------------------------------------
    def _gradient_view(self, arena: Any) -> Any:
        """The torch tensor viewing the gradient block (zero-copy), made again when the arena moved buffers."""
        buffer = arena.buffer
        if self._view is None or self._view[0] is not buffer:
            self._view = (buffer, buffer_view(buffer, (arena.n_elements,)))
        return self._view[1]

    def _reduce_on_gpu(self, grads: Any) -> None:
        torch, dist = self._torch, self._dist
        if not self.deterministic:
            dist.all_reduce(grads, op=dist.ReduceOp.AVG, group=self.group)
            return
        gathered = torch.empty(self.world_size * grads.numel(), dtype=grads.dtype, device=grads.device)
        dist.all_gather_into_tensor(gathered, grads, group=self.group)
        parts = gathered.view(self.world_size, -1)
        total = parts[0].clone()
        for r in range(1, self.world_size):   # rank order, whatever the all-gather's algorithm
            total += parts[r]
        torch.div(total, self.world_size, out=grads)

    # -- Vulkan: gloo on host memory ------------------------------------------------------------------------
    def _reduce_on_host(self, grads: np.ndarray) -> np.ndarray:
        torch, dist = self._torch, self._dist
        local = torch.from_numpy(np.ascontiguousarray(grads))
        if self.deterministic:
            parts = [torch.empty_like(local) for _ in range(self.world_size)]
            dist.all_gather(parts, local, group=self.group)
            total = parts[0].clone()
            for part in parts[1:]:   # rank order
                total += part
        else:
            total = local
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.group)
        total /= self.world_size
        return total.numpy()

"""BatchSampler: random mini-batches of a dataset drawn on the GPU, reproducible from a seed.

The dataset (``inputs`` of shape ``(n_rows, in_dim)`` and ``targets`` of shape ``(n_rows, out_dim)``,
float32) is uploaded once. Each step one kernel (``slang_lib/train/batch_sampler.slang``) draws
``batch_size`` row indices uniformly with replacement and gathers those rows into persistent batch tensors,
so no data crosses from the host per step and the draw can be recorded into the step's command buffer.

Index ``i`` of the batch at step ``s`` is ``floor(h * n_rows / 2^32)`` with
``h = pcg(pcg(pcg(seed) ^ s) ^ i)``, ``pcg`` the PCG-RXS-M-XS uint32 hash: a pure function of
(seed, step, i), identical on every device (:func:`reference_indices` computes it in numpy). A sampler
:meth:`~BatchSampler.split` over several processes draws only its part of each batch (rows ``i`` from
``first_row``), so the parts of all processes together are the batch one process would draw.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.runtime.kernel import Kernel
from sopt.utils.validation import as_float32_array, check_int

_THREADS = 256
_MAX_GROUPS = 65535          # per-dimension dispatch limit (Vulkan minimum, also CUDA's y/z limit)
_UINT32 = 1 << 32
_GATHER_BATCH = Kernel("train/batch_sampler", "gather_batch")   # the batch rows, gathered by index


class Batch(NamedTuple):
    """One mini-batch on the GPU: ``inputs`` (B, in_dim) and ``targets`` (B, out_dim), float32 tensors."""

    inputs: spy.Tensor
    targets: spy.Tensor


def _pcg_hash(v: np.ndarray) -> np.ndarray:
    state = (v.astype(np.uint64) * 747796405 + 2891336453) % _UINT32
    word = ((state >> ((state >> 28) + 4)) ^ state) * 277803737 % _UINT32
    return (word >> 22) ^ word


def reference_indices(seed: int, step: int, batch_size: int, n_rows: int, first_row: int = 0) -> np.ndarray:
    """The row indices the GPU draws for ``step`` (uint32, shape ``(batch_size,)``; rows ``first_row`` on of the
    batch), computed in numpy."""
    rows = np.arange(first_row, first_row + batch_size, dtype=np.uint64)
    h = _pcg_hash(_pcg_hash(_pcg_hash(np.array([seed], np.uint64)) ^ np.uint64(step)) ^ rows)
    return ((h * np.uint64(n_rows)) >> np.uint64(32)).astype(np.uint32)


def check_dataset_array(value: Any, name: str) -> np.ndarray | spy.Tensor:
    """``value`` as a finite 2-D float32 array (a 1-D array becomes one column), or a float32 SlangPy tensor.

    ValueError, naming what was expected and what came, for a non-float dtype (an 8-bit image must be
    scaled to floats first), NaN/Inf, values beyond float32's range, an empty array or more than 2
    dimensions. Runs on the host only.
    """
    if isinstance(value, spy.Tensor):
        if value.dtype.name != "float":
            raise ValueError(f"{name} must be a float32 tensor, got a tensor of {value.dtype.name}")
        if len(value.shape) != 2 or not value.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 2-D tensor (n_rows, features), got shape "
                             f"{tuple(value.shape)} (contiguous: {value.is_contiguous()})")
        return value
    if isinstance(value, np.ndarray) or isinstance(value, (list, tuple)):
        array = np.asarray(value)
    else:
        raise ValueError(f"{name} must be a numpy array or a float32 slangpy.Tensor, got {type(value).__name__}")
    if array.dtype.kind != "f":
        raise ValueError(f"{name} must hold floating-point values (float32; float16/float64 are converted), "
                         f"got dtype {array.dtype}" + (" (scale 8-bit images to [0, 1] first)"
                                                       if array.dtype == np.uint8 else ""))
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n_rows, features), got shape {array.shape}")
    finite = np.isfinite(array)
    if not finite.all():
        bad_rows = np.flatnonzero(~finite.all(axis=1))
        raise ValueError(f"{name} must be finite, got {int(array.size - finite.sum())} NaN/Inf value(s) in "
                         f"{bad_rows.size} row(s), first at row {int(bad_rows[0])}")
    return as_float32_array(array, name)   # float64 values beyond float32's range would become Inf


class BatchSampler:
    """Draws ``batch_size`` random rows of (``inputs``, ``targets``) on the GPU each step.

    Args:
        inputs: dataset inputs, ``(n_rows, in_dim)`` float array or float32 ``slangpy.Tensor``.
        targets: dataset targets, ``(n_rows, out_dim)``, same number of rows.
        batch_size: rows per batch (drawn uniformly with replacement).
        seed: 32-bit seed of the draw; the same seed gives the same batches.

    Every argument is checked on the host before anything is uploaded (ValueError naming the problem).
    ``sample`` returns the same two tensors every step (their contents overwritten), so keep no batch across
    steps; ``indices`` holds the rows drawn by the last ``sample``.
    """

    def __init__(self, inputs: Any, targets: Any, batch_size: int, seed: int = 0) -> None:
        inputs = check_dataset_array(inputs, "inputs")
        targets = check_dataset_array(targets, "targets")
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.seed = check_int(seed, "seed", low=0)
        if self.seed >= _UINT32:
            raise ValueError(f"seed must be in [0, 2**32), got {seed}")
        self.n_rows, self.in_dim = (int(s) for s in inputs.shape)
        n_target_rows, self.out_dim = (int(s) for s in targets.shape)
        if n_target_rows != self.n_rows:
            raise ValueError(f"inputs and targets must have the same number of rows, got {self.n_rows} inputs "
                             f"and {n_target_rows} targets")
        if self.batch_size * (self.in_dim + self.out_dim) > _THREADS * _MAX_GROUPS:
            raise ValueError(f"batch_size * (in_dim + out_dim) must be <= {_THREADS * _MAX_GROUPS}, got "
                             f"{self.batch_size} * {self.in_dim + self.out_dim}")
        if self.n_rows * max(self.in_dim, self.out_dim) >= _UINT32:
            raise ValueError(f"the dataset must hold < 2**32 elements per array, got {self.n_rows} rows")
        device = dev.get_device()
        self.inputs = inputs if isinstance(inputs, spy.Tensor) else spy.Tensor.from_numpy(device, inputs)
        self.targets = targets if isinstance(targets, spy.Tensor) else spy.Tensor.from_numpy(device, targets)
        self.batch = Batch(spy.Tensor.empty(device, (self.batch_size, self.in_dim), "float"),
                           spy.Tensor.empty(device, (self.batch_size, self.out_dim), "float"))
        self.indices = spy.Tensor.empty(device, (self.batch_size,), "uint")
        self.first_row = 0   # row of the whole batch that this sampler's row 0 is (see split)
        self.parts = 1       # processes the batch is split over (see split)
        # the step of the next draw, counted on the GPU (see batch_sampler.slang): word p for a draw of parity p
        self._steps = device.create_buffer(size=8, data=np.zeros(2, np.uint32),
                                           usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access)
        self._draws = 0       # draws recorded so far (the next one's parity)
        self._counted = 0     # the step the counter holds for the next draw, unless draws were replayed since:
        self._launches = dev.graph_launches()   # CUDA graphs launched when it was last recorded
        # arguments stay bound between draws; only those that change are rewritten
        self._kernel = _GATHER_BATCH.bind(src_inputs=self.inputs.storage, src_targets=self.targets.storage,
                                          batch_inputs=self.batch.inputs.storage,
                                          batch_targets=self.batch.targets.storage, batch_indices=self.indices.storage,
                                          steps=self._steps)

    def split(self, rank: int, world_size: int) -> None:
        """Draw only process ``rank``'s part of each batch from now on: ``b = batch_size / world_size`` rows, rows
        ``rank * b .. (rank + 1) * b - 1`` of the batch drawn whole (same seed and step), so the parts of ranks
        ``0 .. world_size - 1`` put together are that batch. ``batch_size`` becomes ``b``.

        ValueError (nothing changed) when ``batch_size`` is not a multiple of ``world_size``, ``rank`` is outside
        ``[0, world_size)`` or the sampler is split already."""
        world_size = check_int(world_size, "world_size", low=1)
        rank = check_int(rank, "rank", low=0)
        if rank >= world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if self.parts != 1:
            raise ValueError(f"this BatchSampler is split already (over {self.parts} processes)")
        if self.batch_size % world_size:
            raise ValueError(f"batch_size {self.batch_size} does not split evenly over {world_size} processes; give "
                             f"a multiple of {world_size} (it is the global batch: each process draws batch_size / "
                             f"{world_size} of it)")
        part = self.batch_size // world_size
        dev.invalidate_graphs("a BatchSampler's split (new batch buffers)")
        device = dev.get_device()
        self.batch = Batch(spy.Tensor.empty(device, (part, self.in_dim), "float"),
                           spy.Tensor.empty(device, (part, self.out_dim), "float"))
        self.indices = spy.Tensor.empty(device, (part,), "uint")
        self._kernel.set(batch_inputs=self.batch.inputs.storage, batch_targets=self.batch.targets.storage,
                         batch_indices=self.indices.storage)
        self.batch_size, self.first_row, self.parts = part, rank * part, world_size

    def sample(self, step: int, encoder: spy.CommandEncoder | None = None) -> Batch:
        """Record the draw of the batch for ``step`` into ``encoder`` (or submit it now); returns the batch."""
        step = check_int(step, "step", low=0)
        if step >= _UINT32:
            raise ValueError(f"step must be < 2**32, got {step}")
        args = {"seed": self.seed, "batch_size": self.batch_size, "n_rows": self.n_rows,
                "in_dim": self.in_dim, "out_dim": self.out_dim,
                "in_offset": int(self.inputs.offset), "out_offset": int(self.targets.offset),
                "first_row": self.first_row}
        own = encoder is None
        if own:
            encoder = dev.create_command_encoder()
        parity = self._draws % 2
        # a draw other than the one counted (a resume, an out-of-order step), or the counter moved by a graph
        if step != self._counted or self._launches != dev.graph_launches():
            dev.upload(encoder, self._steps, 4 * parity, np.array([step], np.uint32))
        self._kernel.set(args=args, parity=parity).dispatch(self.batch_size * (self.in_dim + self.out_dim), encoder)
        self._draws += 1
        self._counted = step + 1
        self._launches = dev.graph_launches()
        if own:
            dev.submit(encoder)
        return self.batch

    @property
    def phase(self) -> int:
        """The parity of the next draw's counter word, which alternates with every recorded draw (a captured graph
        replays only from the phase it was captured in)."""
        return self._draws % 2

    def __repr__(self) -> str:
        return (f"BatchSampler(n_rows={self.n_rows}, in_dim={self.in_dim}, out_dim={self.out_dim}, "
                f"batch_size={self.batch_size}, seed={self.seed}"
                + (f", first_row={self.first_row} of {self.parts} parts" if self.parts > 1 else "") + ")")

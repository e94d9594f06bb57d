"""Multiresolution hash grid encoding, Instant-NGP / tiny-cuda-nn "HashGrid" (kernels: slang_lib/nn/hashgrid.slang)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Literal

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.nn import init
from sopt.config.registry import ComponentConfig, register
from sopt.runtime.device import create_command_encoder, get_device, multiprocessor_count, submit
from sopt.autodiff import grad_max
from sopt.nn.batch import BatchBuffers, as_batch, check_output, has_grad
from sopt.runtime.kernel import Kernel, dummy_buffer
from sopt.nn.module import Module
from sopt.nn.seeding import derive_seed
from sopt.autodiff.grad_source import FixedSums, HalfSums
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import check_bool, check_float, check_int

MAX_DIMS = 4          # 2^D cell corners are unrolled per level
MAX_LEVELS = 32
MAX_FEATURES = 8
MAX_LOG2_TABLE_SIZE = 26
INIT_RANGE = 1e-4     # tcnn initialises the table to U(-1e-4, 1e-4)
MAX_FIXED_ENTRIES = 2**29 - 1   # deterministic mode: int64 sums at byte 8 + 8 i must stay below 2^32
COARSE_FLOATS = 12288   # group-shared floats of hashgrid_coarse_backprop_kernel (COARSE_FLOATS in hashgrid.slang;
                        # tests/nn/test_hashgrid.py checks that the two agree)
COARSE_THREADS = 512    # its threads per group (COARSE_THREADS there)
COARSE_GROUPS = 16      # its groups where the multiprocessors are unknown (Vulkan)
COARSE_GROUPS_PER_SM = 2   # groups per multiprocessor on CUDA (faster than 1, as fast as 4)
COARSE_MAX_LEVELS = 8   # its arguments hold 16 bytes per level, 36 + 16 * 8 = 164 in all: under Vulkan's 256 bytes
                        # of push constants (issue 21's grids have 4 coarse levels in 2D, 1 in 3D)
MAX_BYTE_ELEMENTS = 2**30   # the kernels address float buffers by 32-bit byte offsets: element indices below 2^30
_FORWARD_KERNEL = Kernel("nn/hashgrid", "hashgrid_forward_kernel")   # specialised on (in_dims, levels, features, pairs)
_BACKWARD_KERNEL = Kernel("nn/hashgrid", "hashgrid_backward_kernel")   # and on the sum mode
_COARSE_KERNEL = Kernel("nn/hashgrid", "hashgrid_coarse_backprop_kernel")
_COARSE_FIXED_KERNEL = Kernel("nn/hashgrid", "hashgrid_coarse_fixed_backprop_kernel")   # deterministic mode's
_GRAD_MAX_KERNEL = Kernel("nn/hashgrid", "hashgrid_grad_max_kernel")           # deterministic mode, pass 1
_FIXED_TO_GRAD_KERNEL = Kernel("nn/hashgrid", "hashgrid_fixed_to_grad_kernel")   # and pass 3
_HALF_TO_GRAD_KERNEL = Kernel("nn/hashgrid", "hashgrid_half_to_grad_kernel")     # float16 sums' pass 3
SUM_FLOAT, SUM_FIXED, SUM_HALF = 0, 1, 2   # how the table gradient is summed (hashgrid.slang's SUM_*)
GradientPrecision = Literal["float32", "float16"]
OutputLayout = Literal["row_major", "column_major"]
FIXED_PER_THREAD = 4   # floats per thread of pass 3 (FIXED_PER_THREAD in hashgrid.slang)
GRAD_MAX_PER_THREAD = 16   # and of pass 1 (GRAD_MAX_PER_THREAD there)
FORWARD_THREADS = 512   # threads per group of hashgrid_forward_kernel and hashgrid_backward_kernel (hashgrid.slang)


def levels_per_thread(n_features: int) -> int:
    """Levels one thread group of hashgrid_forward_kernel takes, and of hashgrid_backward_kernel without dL/dx: their
    outputs fill one 32-byte sector of y's row (8 floats), at least one level (K in hashgrid.slang)."""
    return max(1, 8 // n_features)


class HashGridConfig(ComponentConfig):
    """Instant-NGP's multiresolution hash encoding (tiny-cuda-nn's keys), d-linear interpolation."""

    otype: Literal["HashGrid"] = "HashGrid"
    n_levels: int = Field(16, ge=1, le=MAX_LEVELS, description="resolution levels (output width n_levels * "
                                                               "n_features_per_level)")
    n_features_per_level: int = Field(2, ge=1, le=MAX_FEATURES, description="features stored per table entry")
    log2_hashmap_size: int = Field(19, ge=1, le=MAX_LOG2_TABLE_SIZE, description="log2 of the table entries per "
                                                                                 "level")
    base_resolution: int = Field(16, ge=1, le=1 << 20, description="grid vertices per side of the coarsest level")
    per_level_scale: float = Field(2.0, ge=1.0, le=16.0, description="resolution factor from one level to the next")
    gradient_precision: GradientPrecision = Field(
        "float32", description="float16: the table gradient summed in half precision with a per-step scale, as "
                               "tiny-cuda-nn's fp16 gradients (half the atomics; needs an even n_features_per_level, "
                               "not deterministic)")


@dataclass(frozen=True)
class GridLevel:
    """One resolution level: ``pos = x * scale + 0.5`` in grid units, ``resolution`` vertices per side,
    table rows ``[offset, offset + size)``, spatial hash when ``hashed`` else dense indexing."""

    scale: float
    resolution: int
    offset: int
    size: int
    hashed: bool


def coarse_levels(levels: list[GridLevel], n_features: int) -> int:
    """How many of the first levels hashgrid_coarse_backprop_kernel takes: the longest run of dense levels from
    level 0 whose rows (``offset + size`` of the last, times ``n_features``) fit its COARSE_FLOATS shared floats,
    at most COARSE_MAX_LEVELS. Deterministic mode's kernel sums int64s in the same shared memory:
    ``coarse_levels(levels, 2 * n_features)``."""
    count = 0
    for level in levels[:COARSE_MAX_LEVELS]:
        if level.hashed or (level.offset + level.size) * n_features > COARSE_FLOATS:
            break
        count += 1
    return count


def coarse_kernel_pays(n: int, in_dims: int, groups: int, coarse: list[GridLevel], n_features: int) -> bool:
    """Whether hashgrid_coarse_backprop_kernel is worth its cost for ``n`` samples in ``groups`` groups: the
    per-sample atomics it removes (``n * len(coarse) * 2^in_dims * n_features``) exceed 1.5 times the ones it adds
    (each group adds every entry of the coarse levels once): about where the kernel stops costing more than it
    saves."""
    if not coarse:
        return False
    entries = (coarse[-1].offset + coarse[-1].size) * n_features
    return n * len(coarse) * 2 ** in_dims * n_features > 1.5 * groups * entries


def half_shift_base(levels: list[GridLevel], first: int, n: int, in_dims: int) -> int:
    """q of float16 sums for ``n`` samples, levels ``first..`` summed in half precision: each term ``w dL/dy 2^S``
    is below ``2^(q+1)`` (S = q - floor(log2 max |dL/dy|)), so a row's sum stays under float16's 65504 for up to
    ``2^(15-q)`` of the largest terms. The bound taken is C = 4 x the mean hits per row of the busiest level,
    ``n 2^in_dims / size``, plus 16 (samples cluster; terms mostly differ in sign): q = 15 - ceil(log2 C), at most
    10 and at least -14 (the largest term stays a normal float16). Scaling by a power of two changes no relative
    precision: q only keeps sums off float16's overflow and small terms off its subnormals."""
    busiest = max((n * 2**in_dims / lv.size for lv in levels[first:]), default=0.0)
    return max(15 - math.ceil(math.log2(4.0 * busiest + 16.0)), -14)


def grid_levels(in_dims: int, n_levels: int, log2_table_size: int, base_resolution: int,
                per_level_scale: float) -> list[GridLevel]:
    """The levels of tcnn's GridEncoding: ``scale = 2^(l log2(per_level_scale)) * base_resolution - 1``
    (in float32), ``resolution = ceil(scale) + 1``, ``size = min(next multiple of 8 of resolution^D,
    2^log2_table_size)``, hashed iff ``resolution^D > size``."""
    levels, offset = [], 0
    log2_scale = np.float32(math.log2(per_level_scale))
    for level in range(n_levels):
        scale = float(np.float32(np.exp2(np.float32(level) * log2_scale) * np.float32(base_resolution) - np.float32(1.0)))
        resolution = int(math.ceil(scale)) + 1
        dense = resolution**in_dims
        size = min(-(-min(dense, 2**31) // 8) * 8, 2**log2_table_size)
        levels.append(GridLevel(scale, resolution, offset, size, dense > size))
        offset += size
    return levels


def level_words(levels: list[GridLevel]) -> np.ndarray:
    """The levels as hashgrid.slang's ``load_level`` reads them: (L, 4) uint32, per level the bits of ``scale``
    (float32), ``resolution``, ``offset``, ``size | hashed << 31`` (sizes are at most 2^26)."""
    words = np.zeros((len(levels), 4), np.uint32)
    for i, lv in enumerate(levels):
        words[i] = (np.float32(lv.scale).view(np.uint32), lv.resolution, lv.offset, lv.size | int(lv.hashed) << 31)
    return words


def _placement(t: spy.Tensor, who: str, name: str) -> tuple[spy.Buffer, int, int, int]:
    """(storage, element offset, row stride, column stride) of the (N, W) tensor ``t``, ValueError when an element
    lies at or past MAX_BYTE_ELEMENTS (the kernels' 32-bit byte offsets)."""
    offset = t.offset
    rows, width = t.shape.as_tuple()
    row, col = t.strides.as_tuple()
    if offset + (rows - 1) * row + (width - 1) * col >= MAX_BYTE_ELEMENTS:
        raise ValueError(f"{who}: {name} reaches element {offset + (rows - 1) * row + (width - 1) * col} of its "
                         f"buffer; the hash grid kernels address below 2^30 floats (4 GiB); use a smaller batch")
    return t.storage, offset, row, col


@register("encoding", "HashGrid", HashGridConfig)
class HashGridEncoding(Module):
    """``x (N, in_dims) in [0, 1] -> y (N, n_levels * n_features)``, level-major: ``y[:, l * F + f]``.

    Instant-NGP's multiresolution hash encoding with tiny-cuda-nn's conventions (``"otype": "HashGrid"``):
    level l has ``scale_l = base_resolution * per_level_scale^l - 1`` and is read at ``pos = x * scale_l +
    0.5`` by d-linear interpolation of the 2^in_dims vertices around it. Coarse levels whose
    ``ceil(scale_l) + 1``-vertex grid fits the level's share of the table are indexed densely; the others
    use tcnn's spatial hash (xor of coordinates times primes 1, 2654435761, 805459861, ...), modulo the
    level size. Inputs outside [0, 1] are not clamped (they wrap like tcnn's).

    Parameter ``table``: (rows, n_features), rows = sum of the level sizes (each at most
    2^log2_table_size), initialised U(-1e-4, 1e-4). Backward adds dL/dtable by atomics (a batch's samples
    share rows) and writes dL/dx when x carries a gradient buffer.

    ``deterministic``: by default the table gradient is summed with float atomics, whose order (and so the
    last bits of the sum) varies from run to run. With ``deterministic=True`` the backward pass sums in
    64-bit fixed point with integer atomics, which is exact and order-free, so the gradient is bit-identical
    run to run: one pass finds M = max |dL/dy| over the batch, every term w dL/dy is scaled by 2^S
    (S = 61 - ceil(log2(N + 1)) - floor(log2 M), so that no entry's sum of <= N M in magnitude can overflow)
    and rounded to an integer, and a last pass over the table adds sum * 2^-S to dL/dtable. Each term's
    rounding error is below N M 2^-62 (for N = 2^18: M 2^-44), far under float32 summation's own error
    (~2^-24 of the running sum per addition). As in the default mode, the coarsest dense levels' terms are
    summed per thread group first (the same integers, so the same bits; ``coarse_levels`` of them, those whose
    int64 sums fit 48 KiB). Costs two extra dispatches (a read of dL/dy, a read of 8 bytes per table entry)
    and 8 bytes per table entry of memory; needs rows * n_features < 2^29.
    NaN or Inf in dL/dy makes every entry of the table gradient non-finite.

    ``gradient_precision="float16"`` (tiny-cuda-nn's fp16 gradients): the same three passes, but the terms
    ``w dL/dy 2^S`` are summed in float16, each pair of features with one packed atomic (half the atomics and half
    the memory traffic of float32 sums), S = q -
    floor(log2 M) with q from :func:`half_shift_base`; the last pass adds ``sum * 2^-S`` to dL/dtable. Each
    term and each addition rounds to float16 (relative 2^-11), and a sum that overflows float16 is clipped to
    +-65504 * 2^-S. The coarse dense levels stay float32 sums. Needs an even n_features; not with deterministic.
    In both modes pass 1 is skipped when the module that writes dL/dy raises M as it writes it (TensorCoreMLP:
    sopt.autodiff.grad_max), and the float16 sums of the last backward are left pending in the optimiser's arena, which
    Adam's update converts as it reads the gradient (sopt.autodiff.grad_source), so pass 3 is skipped too.

    ``output_layout`` (attribute, tiny-cuda-nn's ``set_output_layout``): "row_major" (default) or "column_major",
    y[n, j] at ``j ld + n`` (sopt.nn.batch.column_major): one level per thread group, each warp storing 128
    contiguous bytes of a column, where row-major output goes through group-shared memory (a faster forward). A
    Sequential sets it to the next module's
    ``preferred_input_layout``; the backward reads dL/dy in either layout.

    Args: in_dims 1..4 (2D and 3D are the usual), n_levels 1..32, n_features 1..8, log2_table_size
    1..26, base_resolution >= 1, per_level_scale >= 1, deterministic a bool, gradient_precision "float32" or
    "float16".
    """

    def __init__(self, in_dims: int, n_levels: int = 16, n_features: int = 2, log2_table_size: int = 19,
                 base_resolution: int = 16, per_level_scale: float = 2.0, seed: int = 0,
                 deterministic: bool = False, gradient_precision: GradientPrecision = "float32") -> None:
        self.deterministic = check_bool(deterministic, "HashGridEncoding deterministic")
        if gradient_precision not in ("float32", "float16"):
            raise ValueError(f"HashGridEncoding gradient_precision must be 'float32' or 'float16', got "
                             f"{gradient_precision!r}")
        self.gradient_precision = gradient_precision
        if gradient_precision == "float16" and self.deterministic:
            raise ValueError("HashGridEncoding: gradient_precision='float16' sums in an order-dependent way; it "
                             "cannot be deterministic (use gradient_precision='float32' with deterministic=True)")
        self.in_dims = check_int(in_dims, "HashGridEncoding in_dims", low=1)
        self.n_levels = check_int(n_levels, "HashGridEncoding n_levels", low=1)
        self.n_features = check_int(n_features, "HashGridEncoding n_features", low=1)
        self.log2_table_size = check_int(log2_table_size, "HashGridEncoding log2_table_size", low=1)
        self.base_resolution = check_int(base_resolution, "HashGridEncoding base_resolution", low=1)
        self.per_level_scale = check_float(per_level_scale, "HashGridEncoding per_level_scale", low=1.0)
        seed = check_int(seed, "HashGridEncoding seed", low=0)
        for value, name, high in ((self.in_dims, "in_dims", MAX_DIMS), (self.n_levels, "n_levels", MAX_LEVELS),
                                  (self.n_features, "n_features", MAX_FEATURES),
                                  (self.log2_table_size, "log2_table_size", MAX_LOG2_TABLE_SIZE)):
            if value > high:
                raise ValueError(f"HashGridEncoding {name} must be <= {high}, got {value}")
        if gradient_precision == "float16" and self.n_features % 2:
            raise ValueError(f"HashGridEncoding: gradient_precision='float16' sums pairs of features, so n_features "
                             f"must be even, got {self.n_features}")
        self.in_features = self.in_dims
        self.out_features = self.n_levels * self.n_features
        self.levels = grid_levels(self.in_dims, self.n_levels, self.log2_table_size, self.base_resolution,
                                  self.per_level_scale)
        rows = self.levels[-1].offset + self.levels[-1].size
        if rows * self.n_features > MAX_BYTE_ELEMENTS:
            raise ValueError(f"HashGridEncoding: the table would have {rows * self.n_features} elements, more than "
                             "2^30 (the kernels' 32-bit byte offsets); lower log2_table_size or n_levels")
        if self.deterministic and rows * self.n_features >= MAX_FIXED_ENTRIES:
            raise ValueError(f"HashGridEncoding: deterministic=True needs fewer than {MAX_FIXED_ENTRIES} table entries "
                             f"(32-bit byte offsets of its int64 sums), the table has {rows * self.n_features}; "
                             "lower log2_table_size or n_levels")
        self._sum_mode = SUM_FIXED if self.deterministic else SUM_HALF if gradient_precision == "float16" else SUM_FLOAT
        self.table = Parameter(np.zeros((rows, self.n_features), np.float32), name="table")
        self._table_elements = rows * self.n_features   # table.size, kept (Parameter.size takes a numpy product)
        init.uniform_(self.table, -INIT_RANGE, INIT_RANGE, seed=derive_seed(seed, 0))
        # the per-level constants, read by the kernels from a buffer (Vulkan's 256 bytes of push constants hold
        # the kernels' other arguments, not 20 bytes per level too)
        self._levels = get_device().create_buffer(
            usage=spy.BufferUsage.shader_resource, data=level_words(self.levels))
        self.output_layout: OutputLayout = "row_major"   # sopt.nn.Sequential may set the next module's preference
        # hashgrid_forward_kernel bound, by (pair loads, column-major y), on first use
        self._forward_kernels: dict[tuple[bool, bool], Any] = {}
        self._backward_kernels: dict[bool, Any] = {}   # hashgrid_backward_kernel bound, by column-major dL/dy
        self._buffers = BatchBuffers()
        self._fixed: spy.Buffer | None = None     # fixed-point or float16 sums, made on first backward
        self._max_at = 0                          # byte offset of the next backward's M slot
        self._max_given: tuple | None = None      # (dL/dy's key, M slot) when the module after raised M (grad_max)
        # levels whose table gradient the coarse kernel sums per thread group (0: none); deterministic mode's kernel
        # holds int64 sums, two floats' worth of group-shared memory each
        self.coarse_levels = coarse_levels(self.levels, self.n_features * (2 if self.deterministic else 1))
        self._coarse_kernel: Any = None   # the coarse kernel (of this mode) bound, made on first use
        self._fixed_kernels: tuple[Any, Any] | None = None   # passes 1 and 3 of those sums, bound on first use

    @classmethod
    def from_config(cls, config: HashGridConfig, in_dims: int, *, seed: int = 0,
                    deterministic: bool = False) -> "HashGridEncoding":
        """The encoding of ``config`` for ``in_dims`` inputs; ``seed`` draws the table, ``deterministic`` sums its
        gradient in a fixed order."""
        return cls(in_dims, n_levels=config.n_levels, n_features=config.n_features_per_level,
                   log2_table_size=config.log2_hashmap_size, base_resolution=config.base_resolution,
                   per_level_scale=config.per_level_scale, seed=seed, deterministic=deterministic,
                   gradient_precision=config.gradient_precision)

    def to_config(self) -> HashGridConfig:
        """The config of this encoding (its seed and ``deterministic`` are build arguments, not config keys)."""
        return HashGridConfig(n_levels=self.n_levels, n_features_per_level=self.n_features,
                              log2_hashmap_size=self.log2_table_size, base_resolution=self.base_resolution,
                              per_level_scale=self.per_level_scale, gradient_precision=self.gradient_precision)

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        yield "table", self.table

    def _table_placement(self, tensor: spy.Tensor, name: str) -> tuple[spy.Buffer, int]:
        """(storage, element offset) of the table's values or gradient, fetched at each call (they move into an
        optimiser's arena); ValueError when its last element lies past the kernels' 2^30 floats."""
        offset = tensor.offset
        if offset + self._table_elements > MAX_BYTE_ELEMENTS:
            raise ValueError(f"HashGridEncoding: the table's {name} end at element {offset + self._table_elements} of "
                             "their buffer; the hash grid kernels address below 2^30 floats (4 GiB)")
        return tensor.storage, offset

    def _bind_forward(self, pairs: bool, columns: bool) -> Any:
        """hashgrid_forward_kernel<in_dims, n_levels, n_features, pairs, columns> with its HashGridForwardArgs bound
        (the per-call members set at each forward); ``pairs``: the table's rows are read by feature pairs
        (n_features and the table's offset even); ``columns``: y is column-major."""
        buffer = dummy_buffer()
        kernel = self._forward_kernels[pairs, columns] = _FORWARD_KERNEL.specialise(
            self.in_dims, self.n_levels, self.n_features, int(pairs), int(columns)).bind(
            call={"levels": self._levels, "x": buffer, "table": buffer, "y": buffer, "x_off": 0, "x_row": 0,
                  "x_col": 0, "table_off": 0, "y_off": 0, "y_row": 0, "y_col": 0, "n": 0})
        return kernel

    def _bind_backward(self, columns: bool) -> Any:
        """hashgrid_backward_kernel<in_dims, n_levels, n_features, sum mode, columns> with its HashGridBackwardArgs
        bound (the per-call members set at each backward); ``columns``: dL/dy is column-major."""
        buffer = dummy_buffer()
        kernel = self._backward_kernels[columns] = _BACKWARD_KERNEL.specialise(
            self.in_dims, self.n_levels, self.n_features, self._sum_mode, int(columns)).bind(
            call={"levels": self._levels, "x": buffer, "dx": buffer, "dy": buffer, "table": buffer,
                  "table_grad": buffer, "fixed": buffer, "x_off": 0, "x_row": 0, "x_col": 0, "dx_off": 0,
                  "dx_row": 0, "dx_col": 0, "dy_off": 0, "dy_row": 0, "dy_col": 0, "table_off": 0, "grad_off": 0,
                  "n": 0, "need_dx": 0, "coarse": 0, "max_at": 0, "shift_base": 0})
        return kernel

    def _bind_fixed_kernels(self, fixed: spy.Buffer) -> tuple[Any, Any]:
        """hashgrid_grad_max_kernel and this mode's pass 3 (hashgrid_fixed_to_grad_kernel or
        hashgrid_half_to_grad_kernel) with their HashGridFixedArgs bound (the per-call members set at each
        backward)."""
        def bind(kernel: Kernel) -> Any:
            return kernel.bind(call={"fixed": fixed, "words": fixed, "values": dummy_buffer(), "off": 0, "stride": 0,
                                     "width": 1, "count": 0, "max_at": 0, "shift_base": 0})
        to_grad = _FIXED_TO_GRAD_KERNEL if self._sum_mode == SUM_FIXED else _HALF_TO_GRAD_KERNEL
        self._fixed_kernels = (bind(_GRAD_MAX_KERNEL), bind(to_grad))
        return self._fixed_kernels

    def _fixed_buffer(self) -> spy.Buffer:
        """The buffer of the fixed-point or float16 sums: two M slots (8 bytes), then one int64 per table entry
        (deterministic) or one float16 per table entry (pairs in one word), all zero."""
        if self._fixed is None:
            size = 8 + (8 if self._sum_mode == SUM_FIXED else 2) * self._table_elements
            self._fixed = get_device().create_buffer(
                size=size, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access,
                data=np.zeros(size, np.uint8))
        return self._fixed

    def forward(self, x: Any, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        x = as_batch(x, self.in_features, "HashGridEncoding")
        n = x.shape[0]
        x_at = _placement(x, "HashGridEncoding", "x")
        table, table_off = self._table_placement(self.table.values, "values")
        columns = self.output_layout == "column_major"
        y = self._buffers.get("y", n, self.out_features, grads=True, columns=columns)
        y_at = _placement(y, "HashGridEncoding", "y")
        pairs = self.n_features % 2 == 0 and table_off % 2 == 0
        kernel = self._forward_kernels.get((pairs, columns)) or self._bind_forward(pairs, columns)
        kernel.set_members("call", x=x_at[0], x_off=x_at[1], x_row=x_at[2], x_col=x_at[3], table=table,
                           table_off=table_off, y=y_at[0], y_off=y_at[1], y_row=y_at[2], y_col=y_at[3],
                           n=n)
        # column-major: one level per group (hashgrid.slang)
        kernel.dispatch((-(-n // FORWARD_THREADS) * FORWARD_THREADS, self.n_levels) if columns
                        else self._level_groups(n, self.n_levels), encoder)
        self._max_given = None
        if self._sum_mode != SUM_FLOAT:   # pass 1 reads all of dL/dy for M: its writer may raise M as it writes
            dy_key = grad_max.key(y.grad)
            grad_max.request(y.grad, lambda enc: self._provide_max(dy_key, enc))
        return y

    def _level_groups(self, n: int, levels: int) -> tuple[int, int]:
        """The (x, y) threads of a dispatch in groups of FORWARD_THREADS / K samples x K levels (hashgrid.slang),
        for n samples and ``levels`` levels, the level groups along y."""
        k = levels_per_thread(self.n_features)
        return -(-n // (FORWARD_THREADS // k)) * FORWARD_THREADS, -(-levels // k)

    def backward(self, x: Any, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        x = as_batch(x, self.in_features, "HashGridEncoding")
        n = x.shape[0]
        check_output(y, n, self.out_features, "HashGridEncoding")
        want_dx = has_grad(x)
        dy = y.grad
        x_at = _placement(x, "HashGridEncoding.backward", "x")
        dy_at = _placement(dy, "HashGridEncoding.backward", "dL/dy")
        if self._sum_mode != SUM_FLOAT and dy_at[3] != 1 and dy_at[2] != 1:
            raise ValueError(f"HashGridEncoding.backward: dL/dy must have contiguous rows or columns, got strides "
                             f"{tuple(dy.strides)}")
        dx_at = _placement(x.grad, "HashGridEncoding.backward", "dL/dx") if want_dx else None
        table = self._table_placement(self.table.values, "values")
        # every pass in one command buffer, whoever submits it
        own = encoder is None
        if own:
            encoder = create_command_encoder()
        # float16 sums an earlier backward left pending (scaled by its own S) are converted first: before this
        # call's pass 1, which uses the M slot their conversion clears. This call only adds into the gradient.
        self.table.flush_grad(encoder)
        grad = self._table_placement(self.table.grad_for_adding, "gradient")
        if self._sum_mode != SUM_FLOAT:
            self._fixed_backward(n, x_at, dy_at, dx_at, table, grad, encoder, grad_max.key(dy))
        else:
            coarse = self._coarse_backprop(n, x_at, dy_at, grad, encoder)
            self._dispatch_backward(n, x_at, dy_at, dx_at, table, grad, coarse, encoder)
            self.table.note_grad_written(self._table_elements)
        if own:
            submit(encoder)

    def _dispatch_backward(self, n: int, x_at: tuple, dy_at: tuple, dx_at: tuple | None, table: tuple, grad: tuple,
                           coarse: int, encoder: spy.CommandEncoder, max_at: int = 0, shift_base: int = 0) -> None:
        """Record hashgrid_backward_kernel for ``n`` samples: x, dL/dy, dL/dx as ``_placement`` gives them (dL/dx
        None when x has no gradient), the table's values and gradient as (storage, offset), levels below ``coarse``
        left to the coarse kernel; ``max_at``, ``shift_base``: the fixed-point or float16 sums'."""
        need_dx = dx_at is not None
        if not need_dx:
            dx_at = (dummy_buffer(), 0, 0, 0)
        columns = dy_at[2] == 1 and dy_at[3] != 1   # column-major dL/dy (a (N, 1) one reads as rows)
        kernel = self._backward_kernels.get(columns) or self._bind_backward(columns)
        kernel.set_members(
            "call", x=x_at[0], x_off=x_at[1], x_row=x_at[2], x_col=x_at[3], dy=dy_at[0], dy_off=dy_at[1],
            dy_row=dy_at[2], dy_col=dy_at[3], dx=dx_at[0], dx_off=dx_at[1], dx_row=dx_at[2], dx_col=dx_at[3],
            table=table[0], table_off=table[1], table_grad=grad[0], grad_off=grad[1],
            fixed=self._fixed if self._fixed is not None else dummy_buffer(), n=n, need_dx=int(need_dx), coarse=coarse,
            max_at=max_at, shift_base=shift_base)
        # with dL/dx one thread per sample (it sums over the levels), else the forward's groups of samples x levels
        # (levels from `coarse`)
        if need_dx:
            kernel.dispatch(n, encoder)
        elif coarse < self.n_levels:
            kernel.dispatch(self._level_groups(n, self.n_levels - coarse), encoder)

    def _provide_max(self, dy_key: tuple[int, int], encoder: spy.CommandEncoder) -> tuple[spy.Buffer, int]:
        """For the module about to write dL/dy (sopt.autodiff.grad_max.claim): the M slot of this encoding's next backward,
        which then skips pass 1. Pending float16 sums of an earlier backward are converted first (into
        ``encoder``): their conversion clears that slot."""
        self.table.flush_grad(encoder)
        self._max_given = (dy_key, self._max_at)
        return self._fixed_buffer(), self._max_at

    def _fixed_backward(self, n: int, x_at: tuple, dy_at: tuple, dx_at: tuple | None, table: tuple, grad: tuple,
                        encoder: spy.CommandEncoder, dy_key: tuple[int, int]) -> None:
        """The backward of deterministic mode or float16 sums, recorded into ``encoder`` (arguments as
        :meth:`_dispatch_backward`'s): M = max |dL/dy| (pass 1), the coarse levels' sums (fixed point; float16 sums
        leave them to the float32 coarse kernel) and hashgrid_backward_kernel's (pass 2), then their conversion into
        dL/dtable (pass 3). ``dy_key``: dL/dy's sopt.autodiff.grad_max key (pass 1 is skipped where its writer raised M)."""
        fixed, max_at = self._fixed_buffer(), self._max_at
        self._max_at ^= 4
        max_kernel, _ = self._fixed_kernels or self._bind_fixed_kernels(fixed)
        width = self.out_features
        given, self._max_given = self._max_given, None
        # unless the module that wrote dL/dy raised M with it, and nothing was added to dL/dy since (grad_max)
        if given != (dy_key, max_at) or not grad_max.intact(dy_key):
            # dL/dy's rows, or, column-major, its columns read as rows of n
            rows = dy_at[3] == 1
            max_kernel.set_members("call", values=dy_at[0], off=dy_at[1], stride=dy_at[2] if rows else dy_at[3],
                                   width=width if rows else n, count=n * width, max_at=max_at).dispatch(
                -(-n * width // GRAD_MAX_PER_THREAD), encoder)
        if self._sum_mode == SUM_FIXED:
            shift_base = 61 - n.bit_length()   # S = 61 - log2_n - e (hashgrid.slang)
            # the coarse levels' fixed-point sums per thread group (they need M, so after hashgrid_grad_max)
            coarse = self._coarse_backprop(n, x_at, dy_at, grad, encoder, (fixed, max_at, shift_base))
            count = self._table_elements
        else:
            coarse = self._coarse_backprop(n, x_at, dy_at, grad, encoder)
            shift_base = half_shift_base(self.levels, coarse, n, self.in_dims)
            count = self._table_elements // 2   # half2 words
        self._dispatch_backward(n, x_at, dy_at, dx_at, table, grad, coarse, encoder, max_at, shift_base)
        if self._sum_mode == SUM_HALF and self.table.accepts_pending:
            # pass 3 left to the optimiser's update, which folds the sums (or to whoever reads the gradient first,
            # which flushes them: sopt.autodiff.grad_source); the float32 gradient got only the coarse levels' rows
            self.table.note_grad_written(self.levels[coarse].offset * self.n_features if coarse else 0)
            self.table.leave_pending(HalfSums(fixed, max_at, shift_base, count,
                                              lambda enc: self._to_grad(max_at, shift_base, count, enc),
                                              zero_from=self.table.grad_zero_from))
        elif self._sum_mode == SUM_FIXED and self.table.accepts_pending:
            # the same for the deterministic sums (the coarse levels' went into them too: the float32 gradient got
            # nothing)
            self.table.leave_pending(FixedSums(fixed, max_at, shift_base, count,
                                               lambda enc: self._to_grad(max_at, shift_base, count, enc),
                                               zero_from=self.table.grad_zero_from))
        else:
            self._to_grad(max_at, shift_base, count, encoder)

    def _to_grad(self, max_at: int, shift_base: int, count: int, encoder: spy.CommandEncoder) -> None:
        """Record pass 3 (hashgrid_fixed_to_grad_kernel or hashgrid_half_to_grad_kernel) of the backward call whose M
        slot is ``max_at``, into the table's gradient where it is now."""
        grad = self._table_placement(self.table.grad_for_adding, "gradient")
        self.table.note_grad_written(self._table_elements)
        to_grad_kernel = self._fixed_kernels[1]
        to_grad_kernel.set_members("call", values=grad[0], off=grad[1], count=count, max_at=max_at,
                                   shift_base=shift_base).dispatch(-(-count // FIXED_PER_THREAD), encoder)

    def _coarse_backprop(self, n: int, x_at: tuple, dy_at: tuple, grad: tuple, encoder: spy.CommandEncoder,
                         fixed: tuple[spy.Buffer, int, int] | None = None) -> int:
        """Record hashgrid_coarse_backprop_kernel (the table gradient of levels [0, coarse_levels), summed per thread
        group in group-shared memory) and return how many levels it took: 0 when there are none, x's rows are not
        contiguous or the kernel would not pay (hashgrid_backward_kernel then does every level). x, dL/dy
        as ``_placement`` gives them, ``grad`` the table gradient's (storage, offset). In deterministic mode
        ``fixed`` = (the fixed-point buffer, this call's M slot, its shift_base) and the kernel is
        hashgrid_coarse_fixed_backprop_kernel, which adds its int64 sums there instead of to dL/dtable."""
        if self.coarse_levels == 0 or n == 0 or x_at[3] != 1:
            return 0
        sms = multiprocessor_count()
        groups = min(-(-n // COARSE_THREADS), sms * COARSE_GROUPS_PER_SM if sms else COARSE_GROUPS)
        if not coarse_kernel_pays(n, self.in_dims, groups, self.levels[:self.coarse_levels], self.n_features):
            return 0
        coarse = self.coarse_levels
        bound = self._coarse_kernel
        if bound is None:   # specialised on the level count: its arrays hold only these levels (push constant room)
            levels = {field: [getattr(lv, field) for lv in self.levels[:coarse]]
                      for field in ("scale", "resolution", "offset", "size")}
            kernel = _COARSE_FIXED_KERNEL if self.deterministic else _COARSE_KERNEL
            bound = self._coarse_kernel = kernel.specialise(self.in_dims, coarse, self.n_features).bind(
                call={"x": dummy_buffer(), "dy": dummy_buffer(), "table_grad": dummy_buffer(), "x_off": 0,
                      "x_stride": 0, "dy_off": 0, "dy_stride": 0, "dy_col": 0, "grad_off": 0, **levels, "n": 0,
                      "per_group": 0, "fixed": dummy_buffer(), "max_at": 0, "shift_base": 0})
        if fixed is None:
            target = {"table_grad": grad[0], "grad_off": grad[1]}
        else:
            target = dict(zip(("fixed", "max_at", "shift_base"), fixed))
        bound.set_members(
            "call", x=x_at[0], x_off=x_at[1], x_stride=x_at[2], dy=dy_at[0], dy_off=dy_at[1], dy_stride=dy_at[2],
            dy_col=dy_at[3], n=n, per_group=-(-n // groups), **target).dispatch(groups * COARSE_THREADS, encoder)
        return coarse

    def __repr__(self) -> str:
        return (f"HashGridEncoding(in_dims={self.in_dims}, n_levels={self.n_levels}, n_features={self.n_features}, "
                f"log2_table_size={self.log2_table_size}, base_resolution={self.base_resolution}, "
                f"per_level_scale={self.per_level_scale}" + (", deterministic=True" if self.deterministic else "")
                + (", gradient_precision='float16')" if self._sum_mode == SUM_HALF else ")"))

"""TensorCoreMLP: FullyFusedMLP's network with its matrix products on tensor cores (CUDA only).

tiny-cuda-nn's scheme: half-precision operands, float32 accumulation, float32 master weights. The kernels
(slang_lib/nn/tensor_core_mlp.slang) are PTX ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` products with
``ldmatrix`` operand loads (CUDA inline assembly). Per step:

1. packing: the float32 master parameters (``params``, FullyFusedMLP's flat layout, named per layer as
   FullyFusedMLP's and an MLP's are, so optimisers, checkpoints and state_dicts interchange) are converted to a half
   copy of every W_j, zero-padded to multiples of 16, and a float copy of the biases, by every forward group as it
   stages the weights (the weights change every optimiser step); group 0 also writes them (``pack_reference``'s
   layout) for the deltas kernel. A dispatch of its own would cost host time every step.
2. forward: tiles of TS = 64 samples, 16 rows per warp; every layer z = W_j a + b_j as half MMAs with float32
   accumulation, the bias and activation applied in float32, the activations kept in group-shared memory as
   half; training saves each hidden layer's half output a_{j+1} and layer 0's half inputs a_0 (x, or its fused
   encoding), which the weight gradient of layer 0 reads instead of x.
3. backward, deltas: dz_L = S dL/dy out_act'(y), dz_{j-1} = (W_j^T dz_j) act'(a_j) through the layers (one
   kernel, half MMAs), each stored as half; dL/dx = W_0^T dz_0 / S in float32. S = ``loss_scale`` (tiny-cuda-nn's
   128): half's normal range ends at 6.1e-5, and a mean loss over 2^20 samples has dL/dy near 1e-6.
4. backward, weights: per layer dW_j = sum_n dz_j[n] a_j[n]^T / S as half MMAs over the batch with float32
   accumulation (each group sums its share of the tiles in registers and writes its sums to a row of partial
   sums), and db_j = sum_n dz_j[n] / S (the product with a column of ones), every layer in one dispatch (its y
   is the layer: a dispatch's host time bounds small batches); ``tcmlp_reduce`` adds the
   rows in a fixed order, so the gradients are the same bits on every run (no float atomics).

Precision: outputs within ~1e-3 relative of FullyFusedMLP's float32 ones. The gradients are those of this
half-precision forward, exact to ~1e-3 for its own activation states, which are not always float32's: a ReLU
(or LeakyReLU) unit whose pre-activation is within the half operands' rounding of 0 (|z| <~ 1e-3 for 32 ->
2 x 64 -> 3) can be on here and off in float32. That sample's dL/dx then lacks or gains one unit's term
W_0[h, :] dz_0[h], which is up to ~15% of max|dL/dx| for 64 units, and the hidden layers' batch-summed weight
gradients move by a few % (reproduced by a numpy emulation of the kernels, which agrees with float64 maths
through the same states).
Smooth activations have no such jumps (tanh: ~5e-4 everywhere).

Network: as FullyFusedMLP: a_0 = x (or, with a fused Frequency encoding, sin/cos(2^k pi x) in its layout),
a_{j+1} = act(W_j a_j + b_j) for j < L, y = out_act(W_L a_L + b_L). Activations: those whose derivative follows
from their output (the backward has only the saved half outputs): ReLU, LeakyReLU, Sigmoid, Tanh and None. Sizes:
layer 0's inputs (in_features, or 2 F in_features when encoded) <= 80, hidden_features a multiple of 16 and <= 64,
out_features <= 64. Not recorded on a sopt.Tape (one forward's buffers per batch
size, as FullyFusedMLP outside a tape).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Iterator, Literal

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.runtime import device as dev
from sopt.config.registry import ComponentConfig, register
from sopt.runtime.kernel import Kernel, dummy_buffer
from sopt.autodiff import grad_max
from sopt.nn import flat_layers
from sopt.nn.flat_layers import flat_layout
from sopt.nn.frequency import fused_frequencies
from sopt.nn.activation import Activation, activation_key, activation_name, make_activation, slang_activation
from sopt.nn.mlp import initial_layer_weights
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import check_int

NT = 128   # threads per group of every kernel in tensor_core_mlp.slang
TS = 64   # samples per tile
MAX_WIDTH = 64
MAX_INPUT = 80   # layer 0's inputs (after a fused frequency encoding): K0 <= 80, the group-shared row (88 halves)
WEIGHT_GRAD_GROUPS_PER_SM = 4   # weight-gradient groups per multiprocessor (36 KB of group-shared memory each)
_WEIGHT_GRAD_GROUPS = 264   # and in all where the multiprocessors are unknown
RED_THREADS = 256   # threads per group of tcmlp_reduce_kernel (RED_THREADS there): 32 parameters x 8 slices
TILE_GROUPS_PER_SM = 4   # forward / deltas groups per multiprocessor (80 and 126 registers; the groups loop over the tiles)
_SOURCE = "nn/tensor_core_mlp"
_FORWARD = Kernel(_SOURCE, "tcmlp_forward_kernel")
_DELTAS = Kernel(_SOURCE, "tcmlp_backward_deltas_kernel")
_WEIGHT_GRAD = Kernel(_SOURCE, "tcmlp_weight_grad_kernel")
_REDUCE = Kernel(_SOURCE, "tcmlp_reduce_kernel")
# the members of TcMlp (tensor_core_mlp.slang) set per dispatch: buffers (dummies until set) and offsets
_CALL_BUFFERS = ("tc_params", "tc_x", "tc_y", "tc_dy", "tc_dx", "tc_grads", "tc_dx_max")
_CALL_OFFSETS = ("params_off", "grads_off", "x_off", "x_row", "x_col", "y_off", "dy_off", "dx_off", "dx_row", "dx_col",
                 "dx_max_at")
# activation key -> the kernel's ITcAct struct (derivative from the output)
_SLANG_ACT = {"none": "TcNone", "relu": "TcReLU", "leaky_relu": "TcLeakyReLU", "sigmoid": "TcSigmoid",
              "tanh": "TcTanh"}


def _tensor_key(t: spy.Tensor) -> tuple:
    """What identifies a tensor's data: its memory, offset and shape (a detached view of x, as Sequential passes
    back, is a new object over the same memory)."""
    return (t.storage.device_address, t.offset, t.shape.as_tuple())


def _dx_layout(dx: spy.Tensor) -> int:
    """The deltas kernel's WANT_DX for writing into ``dx``: 1 contiguous rows, 3 column-major, 2 other strides."""
    if dx.is_contiguous():
        return 1
    return 3 if dx.strides.as_tuple()[0] == 1 else 2


def tile_groups(n: int, per_sm: int, unknown: int | None = None) -> int:
    """Groups of a kernel whose groups walk the tiles of TS samples of a batch of n (g, g + groups, ...): one per
    tile, at most ``per_sm`` per multiprocessor where CUDA says how many there are, else at most ``unknown`` (None:
    one per tile). Forward and deltas: TILE_GROUPS_PER_SM (weights staged once per group); weight gradients:
    WEIGHT_GRAD_GROUPS_PER_SM or _WEIGHT_GRAD_GROUPS (a row of partial sums per group)."""
    tiles = align(n, TS) // TS
    sms = dev.multiprocessor_count()
    limit = sms * per_sm if sms else unknown
    return max(1, tiles if limit is None else min(tiles, limit))


def weight_grad_groups(n: int) -> int:
    """Groups per layer of the weight-gradient kernel (and rows of partial sums) for a batch of n."""
    return tile_groups(n, WEIGHT_GRAD_GROUPS_PER_SM, _WEIGHT_GRAD_GROUPS)


def align(n: int, m: int) -> int:
    """n rounded up to a multiple of m."""
    return -(-n // m) * m


def initial_flat(in_features: int, hidden_features: int, hidden_layers: int, out_features: int,
                 activation: Activation | None, output_activation: Activation | None, seed: int) -> np.ndarray:
    """The initial flat parameters (flat_layout's layout): MLP's and FullyFusedMLP's weights for ``seed``."""
    layers, n_params = flat_layout(in_features, hidden_features, hidden_layers, out_features)
    widths = [in_features] + [hidden_features] * hidden_layers + [out_features]
    flat = np.zeros(n_params, np.float32)
    for (i_pad, i_log, o, off), (w, b) in zip(layers, initial_layer_weights(widths, activation, output_activation,
                                                                            True, seed)):
        flat[off:off + o * i_pad].reshape(o, i_pad)[:, :i_log] = w
        flat[off + o * i_pad: off + o * i_pad + o] = b
    return flat


def packed_shapes(in_features: int, hidden_features: int, hidden_layers: int,
                  out_features: int) -> list[tuple[int, int]]:
    """(O_j, K_j) of every layer's half weight copy as the kernels see it: both padded to multiples of 16."""
    k0, o16 = align(in_features, 16), align(out_features, 16)
    return [(o16 if j == hidden_layers else hidden_features, k0 if j == 0 else hidden_features)
            for j in range(hidden_layers + 1)]


def pack_reference(flat: np.ndarray, in_features: int, hidden_features: int, hidden_layers: int,
                   out_features: int) -> tuple[np.ndarray, np.ndarray]:
    """What the forward's group 0 writes to the packed buffers, in numpy: (the half weights, layers back to back,
    each O_j x K_j row-major; the float32 biases, O_j per layer), zero-padded."""
    layers, _ = flat_layout(in_features, hidden_features, hidden_layers, out_features)
    weights, biases = [], []
    for (i_pad, i_log, o, off), (o16, k16) in zip(layers, packed_shapes(in_features, hidden_features, hidden_layers,
                                                                        out_features)):
        w = np.zeros((o16, k16), np.float16)
        w[:o, :i_log] = flat[off:off + o * i_pad].reshape(o, i_pad)[:, :i_log]
        b = np.zeros(o16, np.float32)
        b[:o] = flat[off + o * i_pad: off + o * i_pad + o]
        weights.append(w.ravel())
        biases.append(b)
    return np.concatenate(weights), np.concatenate(biases)


class TensorCoreMLP(Module):
    """MLP on tensor cores (CUDA only); see the module docstring for the maths, precision and parameter layout.

    Args:
        in_features, out_features: input and output widths (out <= 64; in, or with ``encoding`` the encoded
            width 2 F in_features, <= 80).
        hidden_features: width of every hidden layer (a multiple of 16, <= 64).
        hidden_layers: number of hidden layers L (>= 1).
        activation / output_activation: ReLU, LeakyReLU, Sigmoid, Tanh or None (names or Activations as for MLP).
        seed: initialisation seed (FullyFusedMLP's and MLP's weights for the same seed).
        loss_scale: S, the factor on dL/dy before it is rounded to half (divided out of every gradient).
        encoding: None, ``{"otype": "Frequency", "n_frequencies": F}`` or its config (FullyFusedMLP's): the first layer
            reads sin/cos(2^k pi x) computed in the kernels from x's in_features coordinates; no dL/dx then.
        deterministic: accepted for the interface every layer shares; the gradients are always summed in a fixed
            order (per-group partial sums, then tcmlp_reduce), so every run gives the same bits.
    """

    # x may have any strides; a hash grid before it writes column-major (see HashGridEncoding.output_layout), which
    # its float4 column staging reads in as many loads as rows
    preferred_input_layout = "column_major"

    def __init__(self, in_features: int, out_features: int, hidden_features: int = 64, hidden_layers: int = 2,
                 activation: Any = "relu", output_activation: Any = "none", seed: int = 0,
                 loss_scale: float = 128.0, encoding: Any = None, deterministic: bool = False) -> None:
        in_features = check_int(in_features, "TensorCoreMLP in_features", low=1)
        self.n_frequencies = fused_frequencies(encoding, "TensorCoreMLP")
        features = in_features * 2 * self.n_frequencies if self.n_frequencies else in_features
        out_features = check_int(out_features, "TensorCoreMLP out_features", low=1)
        hidden_features = check_int(hidden_features, "TensorCoreMLP hidden_features", low=16)
        hidden_layers = check_int(hidden_layers, "TensorCoreMLP hidden_layers", low=1)
        seed = check_int(seed, "TensorCoreMLP seed", low=0)
        if hidden_features % 16 or hidden_features > MAX_WIDTH or out_features > MAX_WIDTH or features > MAX_INPUT:
            raise ValueError(f"TensorCoreMLP: hidden_features must be a multiple of 16, hidden and out widths <= "
                             f"{MAX_WIDTH} and layer 0's inputs <= {MAX_INPUT}, got in {features}"
                             f"{' (encoded)' if self.n_frequencies else ''}, hidden {hidden_features}, out {out_features}")
        if not (isinstance(loss_scale, (int, float)) and 1.0 <= float(loss_scale) <= 65536.0):
            raise ValueError(f"TensorCoreMLP loss_scale must be a number in [1, 65536], got {loss_scale!r}")
        if dev.device_kind() != "cuda":
            raise RuntimeError("TensorCoreMLP runs on CUDA only (its kernels are tensor-core MMAs); this device is "
                               f"{dev.device_kind()!r}: use FullyFusedMLP there")
        act, out_act = (make_activation(v, f"TensorCoreMLP {w}") for w, v in (("activation", activation),
                                                                               ("output_activation", output_activation)))
        for what, a in (("activation", act), ("output_activation", out_act)):
            if activation_key(a) not in _SLANG_ACT:
                raise ValueError(f"TensorCoreMLP {what}: {activation_key(a)!r} is not supported (the backward needs "
                                 f"f' from f's output): one of {sorted(_SLANG_ACT)}")
        self.in_features, self.out_features = in_features, out_features
        self.hidden_features, self.hidden_layers = hidden_features, hidden_layers
        self.activation_module, self.output_activation_module = act, out_act
        self.activation, self.output_activation = activation_key(act), activation_key(out_act)
        self.loss_scale = float(loss_scale)
        self.deterministic = bool(deterministic)
        self.layers, self._n_params = flat_layout(features, hidden_features, hidden_layers, out_features)
        self.params = Parameter(initial_flat(features, hidden_features, hidden_layers, out_features, act, out_act,
                                             seed), name="params")
        self._windows = tuple(flat_layers.layer_windows(self.params, self.layers, self._first_state_index()))
        self._shapes = packed_shapes(features, hidden_features, hidden_layers, out_features)
        sizes = (features, align(features, 16), hidden_features, out_features, align(out_features, 16),
                 hidden_layers)
        acts = (_SLANG_ACT[self.activation], _SLANG_ACT[self.output_activation])
        self._forward = {save: _FORWARD.specialise(*sizes, *acts, save, self.n_frequencies) for save in (0, 1)}
        # dL/dx: none (0), into contiguous rows (1), at any strides (2), column-major (3); and its max |dL/dx|
        # for the module before (sopt.autodiff.grad_max)
        self._deltas = {(dx, m): _DELTAS.specialise(*sizes, *acts, dx, m) for dx in (0, 1, 2, 3) for m in (0, 1)
                        if dx or not m}
        self._weight_grad = _WEIGHT_GRAD.specialise(*sizes)   # every layer in one dispatch (its y: the layer)
        device = dev.get_device()
        self._packed = spy.Tensor.zeros(device, (sum(o * k for o, k in self._shapes) // 2,), "float")  # half pairs
        self._bias = spy.Tensor.zeros(device, (sum(o for o, _ in self._shapes),), "float")
        self._buffers: dict[int, dict[str, spy.Tensor]] = {}
        self._bound: dict[tuple, dev.BoundKernel] = {}
        self._forwarded: tuple | None = None   # _tensor_key of (x, y) of the last training forward

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """Per-layer ``("{k}.weight", W_k)``, ``("{k}.bias", b_k)`` as FullyFusedMLP's: windows of the flat
        ``params``."""
        for w in self._windows:
            yield w.key, w

    def storage_parameters(self) -> list[Parameter]:
        return [self.params]

    def _first_state_index(self) -> int:
        """The module index of layer 0 in the parameter names: 1 after a fused frequency encoding (MLP's module 0)."""
        return 1 if self.n_frequencies else 0

    def layer_slices(self, flat: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """(W_j (out, in), b_j) per layer cut from ``flat`` (default: the current values)."""
        return flat_layers.layer_slices(self.layers, self.params.numpy() if flat is None else flat)

    def _params_of(self, a: Activation | None) -> float:
        return float(slang_activation(a)[1][0])

    def _buffers_for(self, n: int) -> dict[str, spy.Tensor]:
        """y (n x out, with its gradient), half buffers (as float pairs) of the saved activations (L x n_pad x
        H), layer 0's half inputs (n_pad x K0), the deltas (n_pad x (L H + O16)), and the weight-gradient groups' sums (groups x the flat layout's
        floats; entries of the layout's padding are never written and stay 0)."""
        b = self._buffers.get(n)
        if b is None:
            device = dev.get_device()
            n_pad = align(n, TS)
            h, L, o16 = self.hidden_features, self.hidden_layers, align(self.out_features, 16)
            b = {"y": spy.Tensor.zeros(device, (n, self.out_features), "float").with_grads(zero=True),
                 "saved": spy.Tensor.zeros(device, (L * n_pad * h // 2,), "float"),
                 "dz": spy.Tensor.zeros(device, (n_pad * (L * h + o16) // 2,), "float"),
                 "x16": spy.Tensor.zeros(device, (n_pad * self._shapes[0][1] // 2,), "float"),
                 "partial": spy.Tensor.zeros(device, (weight_grad_groups(n) * self._n_params,), "float")}
            if len(self._buffers) >= 4:
                self._buffers.pop(next(iter(self._buffers)))
                self._bound.clear()
            self._buffers[n] = b
        return b

    def _check_input(self, x: spy.Tensor) -> int:
        if not isinstance(x, spy.Tensor) or str(x.dtype.full_name) != "float" or len(x.shape) != 2 or \
                x.shape[1] != self.in_features:
            raise ValueError(f"TensorCoreMLP: expected a float32 slangpy.Tensor of shape (N, {self.in_features}), got "
                             f"{getattr(x, 'shape', type(x).__name__)}")
        return int(x.shape[0])

    def _kernel(self, kernel: Kernel, n: int) -> dev.BoundKernel:
        """``kernel`` with its argument ``call`` (TcMlp of tensor_core_mlp.slang) bound: what every dispatch of
        batch size n shares set, the per-call buffers dummies and offsets 0 until ``set_members("call", ...)``."""
        key = (kernel, n)
        bound = self._bound.get(key)
        if bound is None:
            b = self._buffers_for(n)
            call: dict[str, Any] = {name: dummy_buffer() for name in _CALL_BUFFERS}
            call.update({name: 0 for name in _CALL_OFFSETS})
            call.update(n_rows=n, n_pad=align(n, TS), tc_packed=self._packed.storage,
                        tc_bias=self._bias.storage, tc_saved=b["saved"].storage, tc_dz=b["dz"].storage,
                        tc_x16=b["x16"].storage,
                        tc_partial=b["partial"].storage, n_params=self._n_params, n_groups=weight_grad_groups(n),
                        n_tile_groups=tile_groups(n, TILE_GROUPS_PER_SM),
                        loss_scale=self.loss_scale, act_param=self._params_of(self.activation_module),
                        out_act_param=self._params_of(self.output_activation_module))
            bound = self._bound[key] = kernel.bind(call=call)
        return bound

    def forward(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        n = self._check_input(x)
        b = self._buffers_for(n)
        y, p = b["y"], self.params.values
        own = encoder is None
        if own:
            encoder = dev.create_command_encoder()
        x_row, x_col = x.strides.as_tuple()
        self._kernel(self._forward[int(self.training)], n).set_members(
            "call", tc_params=p.storage, params_off=p.offset, tc_x=x.storage, x_off=x.offset, x_row=x_row, x_col=x_col,
            tc_y=y.storage, y_off=y.offset).dispatch(tile_groups(n, TILE_GROUPS_PER_SM) * NT, encoder)
        if own:
            dev.submit(encoder)
        self._forwarded = (_tensor_key(x), _tensor_key(y)) if self.training else None
        return y

    def backward(self, x: spy.Tensor, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        n = self._check_input(x)
        if self._forwarded != (_tensor_key(x), _tensor_key(y)):
            raise ValueError("TensorCoreMLP.backward: (x, y) must be the last training forward()'s input and output")
        g = self.params.grad
        want_dx = int(x.grad_out is not None)
        if want_dx and self.n_frequencies:
            raise ValueError("TensorCoreMLP.backward: x wants a gradient, but a fused Frequency encoding gives no dL/dx; "
                             "run FrequencyEncoding before TensorCoreMLP in a sopt.nn.Sequential for it")
        own = encoder is None
        if own:
            encoder = dev.create_command_encoder()
        dx = x.grad if want_dx else y.grad   # unused without want_dx (a buffer must be bound)
        x_row, x_col = x.strides.as_tuple()
        dx_row, dx_col = dx.strides.as_tuple() if want_dx else (0, 0)
        dx_max = grad_max.claim(dx, encoder) if want_dx else None   # the module before may want max |dL/dx|
        max_buffer, max_at = dx_max if dx_max is not None else (dx.storage, 0)
        self._kernel(self._deltas[_dx_layout(dx) if want_dx else 0, int(dx_max is not None)], n).set_members(
            "call", tc_x=x.storage, x_off=x.offset, x_row=x_row, x_col=x_col, tc_y=y.storage, y_off=y.offset,
            tc_dy=y.grad.storage, dy_off=y.grad.offset, tc_dx=dx.storage, dx_off=dx.offset, dx_row=dx_row,
            dx_col=dx_col, tc_dx_max=max_buffer, dx_max_at=max_at).dispatch(tile_groups(n, TILE_GROUPS_PER_SM) * NT,
                                                                          encoder)
        groups = weight_grad_groups(n)
        self._kernel(self._weight_grad, n).set_members("call", tc_x=x.storage, x_off=x.offset, x_row=x_row,
                                                       x_col=x_col).dispatch((groups * NT, self.hidden_layers + 1),
                                                                             encoder)
        self._kernel(_REDUCE, n).set_members("call", tc_grads=g.storage, grads_off=g.offset).dispatch(
            -(-self._n_params // 32) * RED_THREADS, encoder)
        if own:
            dev.submit(encoder)

    # -- config and state_dict ------------------------------------------------------------------------------------
    # (appended after the kernels' part of the class; the names they use are imported at the end of the file)
    @classmethod
    def from_config(cls, config: "TensorCoreMLPConfig", in_features: int, out_features: int, *, encoding: Any = None,
                    seed: int = 0, deterministic: bool = False) -> "TensorCoreMLP":
        """The network of ``config`` from ``in_features`` to ``out_features`` (the registry's ``build("network",
        ...)``). ``encoding``: None or a Frequency encoding (its config, or the constructor's dict), fused into
        the first layer; other encodings go before it in a Sequential.
        ``seed`` draws the weights; ``deterministic`` goes to the constructor (its weight gradients are summed in a
        fixed order either way). RuntimeError naming ``network.otype`` and FullyFusedMLP on a device but CUDA."""
        fused_frequencies(encoding, "TensorCoreMLP")   # an encoding it cannot fuse is refused on any device
        if dev.device_kind() != "cuda":
            raise RuntimeError(cuda_only_message(f"this device is {dev.device_kind()!r}"))
        return cls(in_features, out_features, hidden_features=config.n_neurons, hidden_layers=config.n_hidden_layers,
                   activation=config.activation, output_activation=config.output_activation, seed=seed,
                   loss_scale=config.loss_scale, encoding=encoding, deterministic=deterministic)

    def to_config(self) -> "TensorCoreMLPConfig":
        """The network's config (the seed and ``deterministic`` are build arguments). ValueError for an activation
        with non-default options (a config names the activation only)."""
        return TensorCoreMLPConfig(
            n_neurons=self.hidden_features, n_hidden_layers=self.hidden_layers,
            activation=activation_name(self.activation_module, "TensorCoreMLP.to_config activation"),
            output_activation=activation_name(self.output_activation_module,
                                              "TensorCoreMLP.to_config output_activation"),
            loss_scale=self.loss_scale)

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Per-layer float32 copies keyed as ``named_parameters()`` (FullyFusedMLP's and an MLP's of the same sizes:
        ``"0.weight"`` (out, in), ``"0.bias"``, ..., from ``"1.weight"`` after a fused encoding), read in one
        download of ``params``; so a state_dict of either network loads into the other."""
        return self.as_state_dict(self.params.numpy())

    def as_state_dict(self, flat: np.ndarray) -> "OrderedDict[str, np.ndarray]":
        """A flat vector laid out as ``params`` (its values, its gradient) as per-layer arrays keyed as
        ``state_dict()``."""
        return flat_layers.as_state_dict(self.layers, flat, self._first_state_index())

    def _load_state(self, values: dict[str, np.ndarray]) -> None:
        """Write the checked per-layer ``values`` into the flat ``params`` (layers absent from ``values`` keep theirs)."""
        self.params.load(flat_layers.load_state(self.layers, self.params.numpy(), values, self._first_state_index()))

    def load_layers(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Set every (W_j, b_j) from arrays shaped (out, in) and (out,), e.g. copied from torch.nn.Linear."""
        flat_layers.check_layers(self.layers, layers, "TensorCoreMLP.load_layers")
        self.params.load(flat_layers.flatten(self.layers, layers))


# -- the "network" family's TensorCoreMLP ---------------------------------------------------------------------------
TensorCoreActivationName = Literal["None", "ReLU", "LeakyReLU", "Sigmoid", "Tanh"]
"""The activations TensorCoreMLP takes: those whose derivative follows from their output."""


def cuda_only_reason(why: str) -> str:
    """Why a config's TensorCoreMLP is refused where CUDA is not used (``why``: the device, or why no CUDA), and
    what to use instead; a problem config's error line puts ``config network.otype = 'TensorCoreMLP': `` before
    it."""
    return (f"runs on CUDA only (half-precision tensor-core MMAs); {why}: use 'FullyFusedMLP' (float32; the same "
            "parameters and state_dict)")


def cuda_only_message(why: str) -> str:
    """:func:`cuda_only_reason` naming the key: what building a TensorCoreMLP from a config raises off CUDA."""
    return f"network.otype = 'TensorCoreMLP' {cuda_only_reason(why)}"


def cuda_unavailable() -> str | None:
    """Why sopt's device will not be CUDA here, or None when it may be, found without creating a device (configs
    are checked before): ``SOPT_DEVICE`` naming another backend, or no working CUDA driver (get_device then
    picks Vulkan)."""
    wanted = os.environ.get("SOPT_DEVICE", "").strip().lower()
    if wanted and wanted != "cuda":
        return f"SOPT_DEVICE={wanted} selects another backend"
    if dev.cuda_memory_total() is None:
        return "this machine has no working CUDA driver"
    return None


class TensorCoreMLPConfig(ComponentConfig):
    """A small MLP with half-precision tensor-core products (sopt.nn.TensorCoreMLP; CUDA only; tiny-cuda-nn's
    FullyFusedMLP scheme: half operands, float32 accumulation and master weights). Layer 0 takes <= 80 inputs
    (after a fused Frequency encoding)."""

    otype: Literal["TensorCoreMLP"] = "TensorCoreMLP"
    n_neurons: int = Field(64, ge=16, le=MAX_WIDTH, multiple_of=16, description="width of every hidden layer "
                                                                                "(features, a multiple of 16)")
    n_hidden_layers: int = Field(2, ge=1, le=64, description="hidden layers")
    activation: TensorCoreActivationName = Field("ReLU", description="activation after every hidden layer "
                                                                     "(LeakyReLU: slope 0.01)")
    output_activation: TensorCoreActivationName = Field("None", description="activation after the output layer")
    loss_scale: float = Field(128.0, ge=1.0, le=65536.0, description="factor on dL/dy before it is rounded to half "
                                                                     "(divided out of every gradient)")


register("network", "TensorCoreMLP", TensorCoreMLPConfig)(TensorCoreMLP)

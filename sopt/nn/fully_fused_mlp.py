"""FullyFusedMLP: a multilayer perceptron trained with hand-fused kernels (slang_lib/nn/fully_fused_mlp.slang).

The tiny-cuda-nn idea in float32. Samples go in tiles of 64 through thread groups of 128 threads; a tile's
activations stay in groupshared memory and every layer is a small matrix product there, each thread
computing a register block of 8 samples x 4 features. The forward pass evaluates every layer (and the
optional frequency encoding) in one kernel and saves each pre-activation z. The backward pass is one kernel
per layer, which reads dL/dz of its layer, writes dL/dz of the layer below = (W^T dL/dz) * act'(z below),
and accumulates dW = sum_n dL/dz_n a_n^T in registers across the tiles its group visits (one atomic add
per weight per group). An output layer of <= 4 features is folded into the last hidden layer's kernel.
The order of those atomic adds (the groups', and within a group those of the threads that split a tile's
samples between them) varies, so the weight gradients can differ in the last bits between runs;
``deterministic=True`` makes them bit-identical: each group sums its threads in thread order and stores the
sums in a scratch buffer (groups x parameters floats, kept per batch size), and one more kernel adds the
groups' sums in group order into the gradient.
Use it where a ``Sequential`` of ``Linear`` layers is too slow.

The frequency encoding is tiny-cuda-nn's, sin/cos(2^k pi x), computed with exact argument reduction
(accurate to float32 rounding even at 2^15 pi x, where sin(float(2^k pi) * x) is off by ~1e-3); the same
maths (slang_lib/nn/frequency_math.slang) as FrequencyEncoding's.

One MLP: the activations are the Slang structs MLP's layers use (slang_lib/nn/activation_functions.slang,
with their parameters: LeakyReLU's slope, Sine's w0, Softplus' beta and threshold), named and parsed as
for MLP (sopt.nn.activation.make_activation); the initial weights are MLP's (sopt.nn.mlp.initial_layer_weights)
for the same seed; and ``state_dict()`` has MLP's keys and shapes, so that after
``ff.load_state_dict(mlp.state_dict())`` both compute the same function and gradients.

Network, for hidden layers j = 0..L-1 and the output layer L::

    a_0 = x                      (in_features, zero-padded to a multiple of 4)
    a_{j+1} = act(W_j a_j + b_j)  (hidden_features)
    y = out_act(W_L a_L + b_L)    (out_features)

Parameters: one flat Parameter ``params`` holding, layer after layer, W_j (out x padded in, row-major) then b_j,
each layer starting at a multiple of 4 floats (``layer_slices`` gives each layer's views; padding columns zero): the
storage the kernels read and an optimiser's arena holds. Every path names the layers as an ``MLP`` does:
``named_parameters()`` gives ``"{k}.weight"`` (out, in) and ``"{k}.bias"`` for layer k, with k counted from 1 when a
frequency encoding is fused (MLP's encoding is its module 0), each a window of ``params``
(sopt.autodiff.parameter_window.ParameterWindow), and ``state_dict()``, ``vjp``'s gradients, ``gradcheck``,
optimiser groups and state, ``sopt.save``/``load`` and sopt.torch use those names and shapes. Initialised like MLP
(Kaiming for ReLU / LeakyReLU hidden layers, SIREN for Sine, torch.nn.Linear's default otherwise). Sizes:
hidden_features and out_features must be <= 64 (registers and groupshared tiles); the (encoded) input width padded
to 4 up to 512: above 64 (tiny-cuda-nn accepts any width too), the first layer's product runs over its inputs in
chunks of <= 64 columns (each chunk's features encoded and weight columns staged in turn), and its backward pass is
one dispatch per chunk.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterator, Literal

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.runtime import device as dev
from sopt.config.registry import ComponentConfig, register
from sopt.runtime.kernel import Kernel, dummy_buffer
from sopt.nn import flat_layers
from sopt.nn.frequency import fused_frequencies
from sopt.nn.activation import (Activation, ActivationName, activation_key, activation_name, make_activation,
                                slang_activation)
from sopt.nn.mlp import initial_layer_weights
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter
from sopt.autodiff.tape import current_tape, new_tensor
from sopt.utils.validation import check_bool, check_int

NT = 128  # threads per group of every kernel in fully_fused_mlp.slang
TS = 64  # samples per tile
_MAX_BOUND = 8192  # bound kernels (and forward calls) remembered: a rollout calls the network once per step
MAX_WIDTH = 64  # hidden and output features
# the (encoded) input features padded to 4: above 64, the first layer runs in chunks of <= 64 input columns
# (_chunk_width), inside the forward kernel and as one backward dispatch per chunk
MAX_INPUT_WIDTH = 512
_MAX_BACKWARD_GROUPS = 264  # 2 per multiprocessor of a 132-multiprocessor GPU: the prefetching backward kernels
                            # hold ~210 registers a thread
_SOURCE = "nn/fully_fused_mlp"
_FORWARD = Kernel(_SOURCE, "ffmlp_forward_kernel")    # generic: ffmlp_forward's arguments
_BACKWARD = Kernel(_SOURCE, "ffmlp_backward_kernel")  # generic: ffmlp_backward's arguments
_REDUCE_PARTIALS = Kernel(_SOURCE, "ffmlp_reduce_partials_kernel")

# FFMLPArgs' members (slang_lib/nn/fully_fused_mlp.slang): buffers, then numbers. A kernel is bound with every
# member (those it does not read: a dummy buffer, zero), so that each dispatch's struct has the same keys and
# BoundKernel writes only the members that changed.
_ARG_BUFFERS = ("mlp_params4", "mlp_grads", "mlp_x", "mlp_saved", "mlp_y", "mlp_dy", "mlp_dz", "mlp_dzp", "mlp_dx",
                "mlp_partials")
_ARG_NUMBERS = ("n_rows", "n_pad", "params_off", "grads_off", "x_off", "y_off", "saved_off", "dy_off", "dy_row_stride",
                "dy_col_stride", "dz_off", "dzp_off", "dx_off", "layer_param_off", "layer_z_row", "prev_z_row",
                "n_groups", "top_param_off", "top_z_row", "partials_stride", "n_params", "in_col")


class _Launch:
    """A fully_fused_mlp.slang kernel bound to its one argument struct ``args`` (FFMLPArgs), set by member name.

    Bound once with every member (unread ones: a dummy buffer, zero); :meth:`set` writes only the members given
    that changed (``BoundKernel.set_members``), where a whole-struct ``BoundKernel.set(args=...)`` would compare
    all ~34 members on every call, a host cost that a fused network's training step pays several times."""

    __slots__ = ("bound",)

    def __init__(self, kernel: Kernel, **members: Any) -> None:
        args: dict[str, Any] = {name: dummy_buffer() for name in _ARG_BUFFERS}
        args.update({name: 0 for name in _ARG_NUMBERS})
        args.update(act_p=spy.float2(0.0, 0.0), out_act_p=spy.float2(0.0, 0.0))
        args.update(members)
        self.bound = kernel.bind(args=args)

    def set(self, **members: Any) -> "_Launch":
        """Set members of ``args`` (unknown names are refused: a misspelt one would bind nothing)."""
        self.bound.set_members("args", **members)
        return self

    def dispatch(self, threads: int, encoder: spy.CommandEncoder | None = None) -> None:
        self.bound.dispatch(threads, encoder)




class FullyFusedMLPConfig(ComponentConfig):
    """A small MLP evaluated in fused kernels (sopt.nn.FullyFusedMLP; hidden widths <= 64, inputs <= 512)."""

    otype: Literal["FullyFusedMLP"] = "FullyFusedMLP"
    n_neurons: int = Field(64, ge=4, le=MAX_WIDTH, multiple_of=4, description="width of every hidden layer "
                                                                               "(features, a multiple of 4)")
    n_hidden_layers: int = Field(2, ge=1, le=64, description="hidden layers")
    activation: ActivationName = Field("ReLU", description="activation after every hidden layer (LeakyReLU: "
                                                           "slope 0.01, Sine: sin(30 z))")
    output_activation: ActivationName = Field("None", description="activation after the output layer")


def _backward_groups(n: int) -> int:
    """Thread groups of the backward kernels for a batch of n: one per tile, at most _MAX_BACKWARD_GROUPS."""
    return max(1, min(_MAX_BACKWARD_GROUPS, -(-n // TS)))


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _chunk_width(i4: int) -> int:
    """Input columns per chunk of a first layer with i4 padded inputs: i4 itself up to 64, else the columns split
    evenly into ceil(i4 / 64) chunks, rounded up to a multiple of 8 (so that the weight-gradient blocks stay
    <= 8 inputs per thread; the last chunk's columns past i4 are zero). The same formula as ffmlp_forward's KW."""
    if i4 <= TS:
        return i4
    chunks = -(-i4 // TS)
    return (-(-i4 // chunks) + 7) & ~7


def _samples_per_thread(c4: int) -> int:
    """RN: samples per thread in a (c4 columns) x TS tile product, so that the product needs <= NT threads."""
    rn = 1
    while (TS // rn) * (c4 // 4) > NT:
        rn *= 2
    return rn


def _inputs_per_thread(o4: int, i4: int) -> int:
    """RI: inputs per thread in the o4 x i4 weight-gradient block grid (4 outputs each, <= NT threads)."""
    q = i4 // 4
    m = 1
    while q % m or (o4 // 4) * (q // m) > NT:
        m += 1
    return 4 * m


def _make_activation(value: Any, what: str) -> Activation | None:
    """The activation of argument ``what``: as for MLP (make_activation), except that None is refused (the
    constructor's names default to "relu" / "none"; a missing value is more likely a mistake)."""
    if not isinstance(value, (str, dict, Activation)):
        raise ValueError(f"FullyFusedMLP {what} must be a name (e.g. 'ReLU', 'None'), a dict with 'otype' or an "
                         f"Activation, got {value!r}")
    return make_activation(value, f"FullyFusedMLP {what}")


@register("network", "FullyFusedMLP", FullyFusedMLPConfig)
class FullyFusedMLP(Module):
    """MLP with fused kernels; see the module docstring for the maths and the parameter layout.

    Args:
        in_features, out_features: input and output widths.
        hidden_features: width of every hidden layer (<= 64); in_features (after a fused frequency encoding,
            ``in_features * 2 * n_frequencies``) padded to 4 may be up to 512.
        hidden_layers: number of hidden layers L (>= 1).
        activation / output_activation: as for MLP: a name (case and underscores ignored, ``"None"`` for none),
            a dict ``{"otype": "LeakyReLU", "slope": 0.1}`` or an Activation; ``self.activation`` /
            ``self.output_activation`` hold the canonical lower-case name (``"leaky_relu"``, ``"none"``), and
            ``activation_module`` / ``output_activation_module`` the Activation (None for none).
        seed: initialisation seed (the same as MLP's: the same seed gives the same weights).
        encoding: None, or a Frequency encoding fused into the first layer: ``{"otype": "Frequency",
            "n_frequencies": F}`` (F <= 24) or its config (sopt.nn.frequency.fused_frequencies).
        deterministic: bit-identical weight gradients run to run (a fixed-order reduction over the thread
            groups, one more dispatch per backward; see the module docstring).
    """

    def __init__(self, in_features: int, out_features: int, hidden_features: int = 64, hidden_layers: int = 3,
                 activation: Any = "relu", output_activation: Any = "none", encoding: Any = None,
                 seed: int = 0, deterministic: bool = False) -> None:
        in_features = check_int(in_features, "FullyFusedMLP in_features", low=1)
        out_features = check_int(out_features, "FullyFusedMLP out_features", low=1)
        hidden_features = check_int(hidden_features, "FullyFusedMLP hidden_features", low=1)
        hidden_layers = check_int(hidden_layers, "FullyFusedMLP hidden_layers", low=1)
        seed = check_int(seed, "FullyFusedMLP seed", low=0)
        self.deterministic = check_bool(deterministic, "FullyFusedMLP deterministic")
        self.n_frequencies = fused_frequencies(encoding, "FullyFusedMLP")
        if self.n_frequencies:
            if self.n_frequencies > 24:
                raise ValueError(f"FullyFusedMLP n_frequencies must be <= 24, got {self.n_frequencies!r}")
        encoded = in_features * 2 * self.n_frequencies if self.n_frequencies else in_features
        self.encoded_features = encoded
        if _align4(encoded) > MAX_INPUT_WIDTH:
            raise ValueError(f"FullyFusedMLP: the (encoded) input width padded to 4 must be <= {MAX_INPUT_WIDTH} "
                             f"(above {MAX_WIDTH}, the first layer runs in chunks of <= {MAX_WIDTH} inputs), got "
                             f"{encoded}")
        if hidden_features > MAX_WIDTH or out_features > MAX_WIDTH:
            raise ValueError(f"FullyFusedMLP: hidden_features and out_features must be <= {MAX_WIDTH}, got "
                             f"{hidden_features}, {out_features}")
        if hidden_features % 4:
            raise ValueError(f"FullyFusedMLP: hidden_features must be a multiple of 4, got {hidden_features}")
        act, out_act = (_make_activation(value, name) for name, value in (("activation", activation),
                                                                           ("output_activation", output_activation)))
        self.in_features, self.out_features = in_features, out_features
        self.hidden_features, self.hidden_layers = hidden_features, hidden_layers
        self.activation_module, self.output_activation_module = act, out_act
        self.activation, self.output_activation = activation_key(act), activation_key(out_act)
        # (padded in, logical in, out, offset) per layer (sopt.nn.flat_layers, shared with TensorCoreMLP)
        self.layers, _ = flat_layers.flat_layout(encoded, hidden_features, hidden_layers, out_features)
        widths = [encoded] + [hidden_features] * hidden_layers + [out_features]
        self.params = Parameter(self._flatten(initial_layer_weights(widths, act, out_act, True, seed)), name="params")
        self._windows = tuple(flat_layers.layer_windows(self.params, self.layers, self._first_state_index()))
        # the output layer's backward runs inside the last hidden layer's kernel (no dL/dz round trip through
        # memory) when it has <= 4 outputs and the last hidden layer is not layer 0
        self._fold_top = out_features <= 4 and hidden_layers >= 2
        self._kernels = self._declare_kernels()
        self._buffers: dict[int, dict[str, spy.Tensor]] = {}
        # (y, saved) of recent forward calls by id(y): backward finds the activations of the call it is given
        self._calls: OrderedDict[int, tuple[spy.Tensor, spy.Tensor]] = OrderedDict()
        self._last_input: tuple[spy.Tensor | None, int] = (None, 0)
        self._bound: dict[tuple, _Launch] = {}

    @classmethod
    def from_config(cls, config: FullyFusedMLPConfig, in_features: int, out_features: int, *, encoding: Any = None,
                    seed: int = 0, deterministic: bool = False) -> "FullyFusedMLP":
        """The network of ``config`` from ``in_features`` to ``out_features``. ``encoding``: None or a Frequency
        encoding (its config, or the constructor's dict), fused into the first layer; other encodings go before
        the network in a Sequential. ``seed`` draws the weights; ``deterministic`` as the constructor."""
        return cls(in_features, out_features, hidden_features=config.n_neurons, hidden_layers=config.n_hidden_layers,
                   activation=config.activation, output_activation=config.output_activation, encoding=encoding,
                   seed=seed, deterministic=deterministic)

    def to_config(self) -> FullyFusedMLPConfig:
        """The network's config (a fused frequency encoding is a section of its own, ``{"otype": "Frequency",
        "n_frequencies": self.n_frequencies}``; the seed and ``deterministic`` are build arguments). ValueError
        for an activation with non-default options (a config names the activation only)."""
        return FullyFusedMLPConfig(
            n_neurons=self.hidden_features, n_hidden_layers=self.hidden_layers,
            activation=activation_name(self.activation_module, "FullyFusedMLP.to_config activation"),
            output_activation=activation_name(self.output_activation_module, "FullyFusedMLP.to_config output_activation"))

    # -- parameters ----------------------------------------------------------------------------------------------
    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """Per-layer ``("{k}.weight", W_k)``, ``("{k}.bias", b_k)``: windows of the flat ``params``."""
        for w in self._windows:
            yield w.key, w

    def storage_parameters(self) -> list[Parameter]:
        return [self.params]

    def _first_state_index(self) -> int:
        """The module index of layer 0 in ``state_dict()``'s keys (MLP's names: its layer k is module k, or k + 1
        after a fused encoding, MLP's module 0)."""
        return 1 if self.n_frequencies else 0

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Per-layer float32 copies keyed as ``named_parameters()`` (an MLP's of the same sizes: ``"0.weight"``
        (out, in), ``"0.bias"``, ...), read in one download of ``params``."""
        return self.as_state_dict(self.params.numpy())

    def as_state_dict(self, flat: np.ndarray) -> "OrderedDict[str, np.ndarray]":
        """A flat vector laid out as ``params`` (its values, its gradient ``params.grad_numpy()``) as per-layer
        arrays keyed as ``state_dict()``."""
        return flat_layers.as_state_dict(self.layers, flat, self._first_state_index())

    def _load_state(self, values: dict[str, np.ndarray]) -> None:
        """Write the checked per-layer ``values`` into the flat ``params`` (layers absent from ``values`` keep theirs)."""
        self.params.load(flat_layers.load_state(self.layers, self.params.numpy(), values, self._first_state_index()))

    def _flatten(self, layers: list[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
        """The flat parameter vector of per-layer (W (out, in), b (out,)), padding columns and gaps zero."""
        return flat_layers.flatten(self.layers, layers)

    def layer_slices(self, flat: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """(W_j, b_j) per layer as numpy arrays cut from ``flat`` (default: the current values), W_j (out, in)."""
        return flat_layers.layer_slices(self.layers, self.params.numpy() if flat is None else flat)

    def load_layers(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Set every (W_j, b_j) from arrays shaped (out, in) and (out,), e.g. copied from torch.nn.Linear."""
        flat_layers.check_layers(self.layers, layers, "FullyFusedMLP.load_layers")
        self.params.load(self._flatten(layers))

    # -- kernels -------------------------------------------------------------------------------------------------
    def _declare_kernels(self) -> dict[str, Kernel]:
        """This network's kernels by name (``forward_<save>``, ``backward_<layer>_<want dx>``, ``reduce_partials``):
        fully_fused_mlp.slang's generic entry points specialised to its sizes and activations, loaded at first use."""
        # the shared activation structs, bound to the args.act_p / args.out_act_p members (see _kernel)
        act = f"HiddenAct<{slang_activation(self.activation_module)[0]}>"
        out_act = f"OutputAct<{slang_activation(self.output_activation_module)[0]}>"
        h, L, out = self.hidden_features, self.hidden_layers, self.out_features
        raw, freqs = self.in_features, self.n_frequencies
        in4, out4 = _align4(self.encoded_features), _align4(out)
        kernels = {f"forward_{save}": _FORWARD.specialise(raw, freqs, in4, h, out, out4, L, act, out_act, save,
                                                          _samples_per_thread(h), _samples_per_thread(out4))
                   for save in (0, 1)}
        for j, (i_pad, i_log, o, _) in enumerate(self.layers):
            if self._fold_top and j == L:
                continue
            act_o = out_act if j == L else act
            ft = int(self._fold_top and j == L - 1)
            kw = _chunk_width(i_pad)   # i_pad but for a wide first layer: its backward runs chunk by chunk
            for want_dx in ((0, 1) if j == 0 else (1,)):
                kernels[f"backward_{j}_{want_dx}"] = _BACKWARD.specialise(
                    kw, i_log, raw, freqs, o, _align4(o), act_o, act, int(j == L), int(j == 0), want_dx,
                    _samples_per_thread(kw), _inputs_per_thread(_align4(o), kw), ft, out, out4, out_act,
                    int(self.deterministic), i_pad)
        if self.deterministic:
            kernels["reduce_partials"] = _REDUCE_PARTIALS
        return kernels

    def _batch_buffers(self, n: int) -> dict[str, spy.Tensor]:
        """Per-batch-size buffers: y (n x out), the saved pre-activations and two dL/dz scratch buffers,
        feature-major with rows of n_pad = n rounded up to the tile size. (On a sopt.Tape, y and the saved
        pre-activations of each call come from the tape's pool instead; see forward.)"""
        buffers = self._buffers.get(n)
        if buffers is None:
            device = dev.get_device()
            h, L = self.hidden_features, self.hidden_layers
            n_pad = -(-n // TS) * TS
            buffers = {
                "y": spy.Tensor.zeros(device, (n, self.out_features), "float").with_grads(zero=True),
                "saved": spy.Tensor.zeros(device, (n_pad * (h * L + self.out_features),), "float"),
                "d0": spy.Tensor.zeros(device, (n_pad * h,), "float"),
                "d1": spy.Tensor.zeros(device, (n_pad * h,), "float"),
            }
            if self.deterministic:   # per-group sums of the backward pass (never-written padding stays zero)
                buffers["partials"] = spy.Tensor.zeros(device, (_backward_groups(n) * self.params.size,), "float")
            if len(self._buffers) >= 4:
                self._buffers.pop(next(iter(self._buffers)))
            self._buffers[n] = buffers
        return buffers

    def _check_input(self, x: spy.Tensor) -> int:
        if x is self._last_input[0]:   # the same tensor as last call (a training loop's batch): checked then
            return self._last_input[1]
        if not isinstance(x, spy.Tensor):
            raise ValueError(f"FullyFusedMLP: expected a slangpy.Tensor of shape (N, {self.in_features}), got "
                             f"{type(x).__name__}")
        if str(x.dtype.full_name) != "float":
            raise ValueError(f"FullyFusedMLP: expected a float32 tensor, got dtype '{x.dtype.full_name}'")
        if len(x.shape) != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"FullyFusedMLP: expected input of shape (N, {self.in_features}), got {tuple(x.shape)}")
        if not x.is_contiguous():
            raise ValueError("FullyFusedMLP: the input tensor must be contiguous")
        self._last_input = (x, int(x.shape[0]))
        return self._last_input[1]

    # -- forward / backward ---------------------------------------------------------------------------------------
    def _kernel(self, name: str, n: int, x: spy.Tensor, saved: spy.Tensor) -> "_Launch":
        """The kernel ``name`` bound for batch size n, input x and saved activations: its ``args`` struct
        (FFMLPArgs) with the members that never change for this key set once, the others to be set per call."""
        key = (name, n, id(x.storage), x.offset, id(saved.storage), saved.offset)
        bound = self._bound.get(key)
        if bound is None:
            if len(self._bound) > _MAX_BOUND:
                self._bound.clear()
            bound = _Launch(self._kernels[name], mlp_x=x.storage, x_off=x.offset, n_rows=n, n_pad=-(-n // TS) * TS,
                            mlp_saved=saved.storage, saved_off=saved.offset,
                            act_p=spy.float2(*slang_activation(self.activation_module)[1]),
                            out_act_p=spy.float2(*slang_activation(self.output_activation_module)[1]))
            self._bound[key] = bound
        return bound

    def forward(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        n = self._check_input(x)
        if current_tape() is not None:   # this call's own output and activations
            n_pad = -(-n // TS) * TS
            y = new_tensor((n, self.out_features))
            saved = new_tensor((n_pad * (self.hidden_features * self.hidden_layers + self.out_features),), False)
        else:
            b = self._batch_buffers(n)
            y, saved = b["y"], b["saved"]
        self._calls[id(y)] = (y, saved)
        self._calls.move_to_end(id(y))
        while len(self._calls) > _MAX_BOUND:
            self._calls.popitem(last=False)
        p = self.params.values
        self._kernel(f"forward_{int(self.training)}", n, x, saved).set(
            mlp_params4=p.storage, params_off=p.offset, mlp_y=y.storage, y_off=y.offset).dispatch(-(-n // TS) * NT, encoder)
        return y

    def backward(self, x: spy.Tensor, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        n = self._check_input(x)
        if not self.training:
            raise ValueError("FullyFusedMLP.backward: the module is in eval mode (no saved activations); call train()")
        call = self._calls.get(id(y))
        if call is None or call[0] is not y or y.shape.as_tuple() != (n, self.out_features):
            raise ValueError("FullyFusedMLP.backward: y must be the tensor a recent forward() returned for this x")
        b = self._batch_buffers(n)
        p, g = self.params.values, self.params.grad
        h, L = self.hidden_features, self.hidden_layers
        want_input_grad = x.grad_out is not None
        n_groups = _backward_groups(n)
        partials = b.get("partials")
        if self.deterministic and partials.shape[0] < n_groups * self.params.size:   # _MAX_BACKWARD_GROUPS changed
            partials = b["partials"] = spy.Tensor.zeros(dev.get_device(), (n_groups * self.params.size,), "float")
        det_args = {} if partials is None else {"mlp_partials": partials.storage, "partials_stride": self.params.size}
        scratch = [b["d0"], b["d1"]]
        own = encoder is None
        if own:
            encoder = dev.create_command_encoder()
        saved = call[1]
        n_pad = -(-n // TS) * TS
        for j in range(L - 1 if self._fold_top else L, -1, -1):
            dz = scratch[(j + 1) % 2]   # written by layer j + 1 (unused by the output layer)
            dz_storage, dz_off = dz.storage, dz.offset
            if self._fold_top and j == L - 1:   # the output layer folded in: this kernel reads z_{L-1} there
                dz_storage, dz_off = saved.storage, saved.offset + h * (L - 1) * n_pad
            dzp = scratch[j % 2]
            want_dx = 1 if j > 0 else int(want_input_grad)
            dx = x.grad if want_input_grad else dzp
            launch = self._kernel(f"backward_{j}_{want_dx}", n, x, saved).set(
                mlp_params4=p.storage, params_off=p.offset, mlp_grads=g.storage, grads_off=g.offset,
                mlp_dy=y.grad.storage, dy_off=y.grad.offset, dy_row_stride=self.out_features, dy_col_stride=1,
                mlp_dz=dz_storage, dz_off=dz_off, mlp_dzp=dzp.storage, dzp_off=dzp.offset,
                mlp_dx=dx.storage, dx_off=dx.offset, layer_param_off=self.layers[j][3], layer_z_row=h * j,
                prev_z_row=h * (j - 1) if j > 0 else 0, n_groups=n_groups, top_param_off=self.layers[L][3],
                top_z_row=h * L, in_col=0, **det_args)
            i_pad = self.layers[j][0]
            kw = _chunk_width(i_pad)
            launch.dispatch(n_groups * NT, encoder)
            for in_col in range(kw, i_pad, kw):   # a wide first layer's further column chunks, in column order
                launch.set(in_col=in_col).dispatch(n_groups * NT, encoder)
        if self.deterministic:
            self._kernel("reduce_partials", n, x, saved).set(
                mlp_grads=g.storage, grads_off=g.offset, n_groups=n_groups, n_params=self.params.size,
                **det_args).dispatch(self.params.size, encoder)
        if own:
            dev.submit(encoder)

"""The flat parameter layout FullyFusedMLP and TensorCoreMLP share, and its per-layer ``state_dict`` view.

Both networks keep every layer's weights and bias in one flat float32 Parameter: layer after layer, W_j
(out x padded in, row-major) then b_j (out), each layer starting at a multiple of 4 floats; only the first
layer's input is padded (to a multiple of 4), with zero columns. A *layout* is the list of
``(padded in, logical in, out, offset)`` per layer that :func:`flat_layout` gives, and the functions here cut a
flat vector into per-layer arrays named like an MLP's (``"{k}.weight"`` (out, in), ``"{k}.bias"`` (out,)) and
back, so the two networks' ``state_dict()`` have the same keys and shapes for the same sizes (a checkpoint of one
loads into the other) and :func:`state_shapes` tells those keys and shapes without a device. :func:`layer_windows`
names the same per-layer arrays as windows of the flat Parameter (sopt.autodiff.parameter_window): what the
networks' ``named_parameters()`` give.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping, Sequence

import numpy as np

from sopt.autodiff.parameter import Parameter
from sopt.autodiff.parameter_window import ParameterWindow, make_windows

# (padded in, logical in, out, offset in floats) of one layer
LayerLayout = tuple[int, int, int, int]


def _align4(n: int) -> int:
    return (n + 3) & ~3


def flat_layout(in_features: int, hidden_features: int, hidden_layers: int,
                out_features: int) -> tuple[list[LayerLayout], int]:
    """([(padded in, logical in, out, offset) per layer], total floats) of a network of ``hidden_layers`` hidden
    layers of ``hidden_features`` between ``in_features`` (after any fused encoding) and ``out_features``: layer j's
    W (out x padded in; padded in = in_features rounded up to 4 for j = 0, else hidden_features) starts at offset,
    its bias follows, and the next layer starts at the next multiple of 4 floats."""
    layers, offset = [], 0
    for j in range(hidden_layers + 1):
        i_log = in_features if j == 0 else hidden_features
        i_pad = _align4(in_features) if j == 0 else hidden_features
        o = out_features if j == hidden_layers else hidden_features
        layers.append((i_pad, i_log, o, offset))
        offset += _align4(o * i_pad + o)
    return layers, offset


def layout_size(layout: Sequence[LayerLayout]) -> int:
    """Floats of the flat vector of ``layout`` (its last layer's end, rounded up to 4)."""
    i_pad, _, o, off = layout[-1]
    return off + _align4(o * i_pad + o)


def state_names(n_layers: int, first: int = 0) -> list[tuple[str, str]]:
    """(weight key, bias key) per layer: MLP's module names, counted from ``first`` (1 after an MLP's encoding
    module 0, as FullyFusedMLP with a fused frequency encoding)."""
    return [(f"{first + j}.weight", f"{first + j}.bias") for j in range(n_layers)]


def state_shapes(layout: Sequence[LayerLayout], first: int = 0) -> "OrderedDict[str, tuple[int, ...]]":
    """The keys and shapes of the ``state_dict()`` of a network with ``layout`` (no device needed): W_j (out,
    logical in) and b_j (out,) per layer."""
    shapes: OrderedDict[str, tuple[int, ...]] = OrderedDict()
    for (wk, bk), (_, i_log, o, _) in zip(state_names(len(layout), first), layout):
        shapes[wk], shapes[bk] = (o, i_log), (o,)
    return shapes


def layer_windows(base: Parameter, layout: Sequence[LayerLayout], first: int = 0) -> list[ParameterWindow]:
    """W_j (out, logical in; rows of padded in) and b_j (out,) per layer of ``layout`` as windows of the flat
    ``base``, keyed as :func:`state_names` and named as a Linear's Parameters (``"weight"``, ``"bias"``)."""
    specs = []
    for (wk, bk), (i_pad, i_log, o, off) in zip(state_names(len(layout), first), layout):
        specs += [("weight", wk, (o, i_log), (i_pad, 1), off), ("bias", bk, (o,), (1,), off + o * i_pad)]
    return make_windows(base, specs)


def layer_slices(layout: Sequence[LayerLayout], flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W_j (out, logical in), b_j (out,)) per layer, copies cut from ``flat``."""
    return [(flat[off:off + o * i_pad].reshape(o, i_pad)[:, :i_log].copy(),
             flat[off + o * i_pad: off + o * i_pad + o].copy()) for i_pad, i_log, o, off in layout]


def flatten(layout: Sequence[LayerLayout], layers: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
    """The float32 flat vector of per-layer (W (out, logical in), b (out,)); padding columns and gaps zero."""
    flat = np.zeros(layout_size(layout), np.float32)
    for (i_pad, i_log, o, off), (w, b) in zip(layout, layers, strict=True):
        flat[off:off + o * i_pad].reshape(o, i_pad)[:, :i_log] = w
        flat[off + o * i_pad: off + o * i_pad + o] = b
    return flat


def as_state_dict(layout: Sequence[LayerLayout], flat: np.ndarray,
                  first: int = 0) -> "OrderedDict[str, np.ndarray]":
    """A flat vector laid out as ``layout`` (a network's values, its gradient) as
    per-layer arrays keyed as the network's ``state_dict()``."""
    state: OrderedDict[str, np.ndarray] = OrderedDict()
    for (wk, bk), (w, b) in zip(state_names(len(layout), first), layer_slices(layout, flat)):
        state[wk], state[bk] = w, b
    return state


def load_state(layout: Sequence[LayerLayout], flat: np.ndarray, values: Mapping[str, np.ndarray],
               first: int = 0) -> np.ndarray:
    """``flat`` with the checked per-layer ``values`` (a subset of the state_dict's keys, shapes already checked)
    written in: the new flat vector (layers absent from ``values`` keep theirs)."""
    layers = [(values.get(wk, w), values.get(bk, b)) for (wk, bk), (w, b) in
              zip(state_names(len(layout), first), layer_slices(layout, flat))]
    return flatten(layout, layers)


def check_layers(layout: Sequence[LayerLayout], layers: Sequence[tuple[np.ndarray, np.ndarray]], who: str) -> None:
    """ValueError unless ``layers`` holds one (W (out, logical in), b (out,)) per layer of ``layout``."""
    if len(layers) != len(layout):
        raise ValueError(f"{who}: expected {len(layout)} (W, b) pairs, got {len(layers)}")
    for (_, i_log, o, _), (w, b) in zip(layout, layers):
        if np.shape(w) != (o, i_log) or np.shape(b) != (o,):
            raise ValueError(f"{who}: expected W {(o, i_log)} and b {(o,)}, got {np.shape(w)} and {np.shape(b)}")

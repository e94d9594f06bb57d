"""sopt optimisers over torch parameters: ``sopt.optim.Adam(torch_model.parameters(), lr=1e-3)``.

:func:`adopt` turns the torch parameters of an optimiser's ``params`` into sopt Parameters, which the optimiser
moves into its arena as any other; :class:`OptimizerLink` then keeps the torch side in step with the arena
around every ``step``:

- **shared** (CUDA, sopt sharing torch's context): each torch parameter's ``.data`` becomes its zero-copy view of
  the arena's values, following the side a double-buffered step writes, and its ``.grad`` the view of the
  arena's gradient, so torch's backward accumulates straight into what the step reads (and the step zeroes).
  The torch model keeps working unchanged, and the step is sopt's one-dispatch update over all of them.
- **copy** (Vulkan, CPU torch): before the step, gradients (and values torch changed) are uploaded; after it,
  the step is submitted and the new values downloaded into the torch parameters (one wait for the GPU per
  step; a warning names the cost once). The step cannot be recorded into a caller's encoder then.

A TorchModule's parameters bring the sopt Parameters they are (``"0.weight"`` of a FullyFusedMLP: its sopt window of
the flat Parameter, sopt.autodiff.parameter_window), so the optimiser's groups and state name them as the module
does and the module computes with the arena's values; their ``.grad`` stay torch tensors of their own (the module's
backward uses the sopt gradients as scratch) and are copied into the arena before each step. After a step every
linked torch parameter's gradient is zero (sopt's zero-on-step), or None where it was a tensor of its own.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import slangpy as spy
import torch

from sopt.autodiff import tape as tp
from sopt.autodiff.parameter import Parameter
from sopt.autodiff.parameter_window import storage_of
from sopt.torch import placement
from sopt.torch.parameter_views import ParameterView, WindowCache, _contiguous
from sopt.torch.registry import module_parameter

# sopt Parameter -> [(torch parameter, its window of the Parameter, whether its .grad may alias the arena)]
_links: "weakref.WeakKeyDictionary[Parameter, list[tuple[torch.Tensor, ParameterView, bool]]]" = \
    weakref.WeakKeyDictionary()


def adopt(items: list[Any], where: str) -> list[Any]:
    """``items`` with every torch tensor replaced by the sopt Parameter it stands for (a TorchModule's: the sopt
    Parameter of that name, a window of its module's flat one for FullyFusedMLP; any other: a new Parameter holding
    its values). Checked first: float32, on the device sopt can read (ValueError naming ``where[i]``)."""
    out: list[Any] = []
    index: dict[int, Parameter] = {}   # the Parameters given, by id
    linked: set[int] = set()            # the Parameters holding them (a window's base), by id
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            out.append(item)
            continue
        placement.check_tensor(item, f"{where}[{i}] (a torch parameter)")
        owned = module_parameter(item)
        if owned is not None:
            view, alias = owned[1], False
            p, given = view.parameter, view.source if view.source is not None else view.parameter
        else:
            p = given = Parameter(item.detach().cpu().numpy(), name=f"torch.{i}")
            view, alias = ParameterView(p.name, p, p.shape, _contiguous(p.shape), 0), True
        if id(given) not in index:
            index[id(given)] = given
            out.append(given)
        if id(p) not in linked:
            linked.add(id(p))
            _links[p] = []
        _links[p].append((item, view, alias))
    return out


def link_for(params: list[Parameter]) -> "OptimizerLink | None":
    """The link of an optimiser over ``params`` when some were adopted, else None; checked before its arena is
    made: ValueError when only some of a TorchModule's windows of one Parameter were given (the step would move
    the others too). Call :meth:`OptimizerLink.after_step` once the arena holds them."""
    storage = list({id(sp): sp for sp in map(storage_of, params)}.values())   # a window's base once
    entries = [(p, _links[p]) for p in storage if p in _links]
    if not entries:
        return None
    for p, linked in entries:
        owned = module_parameter(linked[0][0])
        if owned is not None:
            given = {id(t) for t, _, _ in linked}
            missing = [v.key for t, v in owned[0].parameter_pairs() if v.parameter is p and id(t) not in given]
            if missing:
                raise ValueError(f"the optimiser was given some of a TorchModule's parameters that share one sopt "
                                 f"Parameter but not {missing}; a step updates all of them: pass them all")
    return OptimizerLink(entries, complete=len(entries) == len(storage))


class OptimizerLink:
    """Keeps an optimiser's torch parameters and its arena in step (see the module docstring)."""

    def __init__(self, entries: list[tuple[Parameter, list[tuple[torch.Tensor, ParameterView, bool]]]],
                 complete: bool = False) -> None:
        self.entries = entries
        self.complete = complete   # every Parameter of the optimiser is linked
        self.mode = placement.mode()
        self._sources: dict[int, Any] = {}     # shared: id(p) -> the sopt array the torch .data view
        self._grad_sources: dict[int, Any] = {}
        self._versions: dict[int, tuple[int, ...]] = {}
        # shared: the torch windows of each Parameter's values (per arena side) and gradient, made once
        self._windows = {id(p): WindowCache([view for _, view, _ in linked]) for p, linked in entries}

    def check_encoder(self, given: bool) -> None:
        """ValueError (before anything changes) for a step recorded into a caller's encoder in copy mode."""
        if given and self.mode == placement.COPY:
            raise ValueError("a sopt optimiser over CPU torch parameters (sopt on Vulkan) copies the new values back "
                             "after its step, so it submits the step itself: call step() without an encoder")

    def before_step(self, encoder: spy.CommandEncoder) -> None:
        """Bring the torch gradients (and, copy mode, values torch changed) into the arena before the update:
        uploads recorded into ``encoder`` (copy mode), or torch copies on torch's stream (shared). A gradient
        that already is its window of the arena (a view: torch accumulated there, or a TorchModule's backward
        wrote there) is not copied; a Parameter whose torch gradients are all None is cleared in ``encoder``."""
        if self.mode == placement.COPY:
            self.upload(encoder)
            return
        with torch.no_grad():
            for p, linked in self.entries:
                if all(t.grad is None for t, _, _ in linked):
                    tp.clear(encoder, p.grad)
                    continue
                for (t, _, _), window in zip(linked, self._windows[id(p)].of(p.grad)):
                    g = t.grad
                    if g is None:
                        window.zero_()
                    elif g is not window and not _same_memory(g, window):
                        window.copy_(g)

    def upload(self, encoder: spy.CommandEncoder) -> None:
        """Copy mode: record uploads of the torch gradients and of values torch changed since the last step."""
        for p, linked in self.entries:
            versions = tuple(t._version for t, _, _ in linked)
            if versions != self._versions.get(id(p)):
                values = p.numpy().reshape(-1)
                for t, view, _ in linked:
                    _window(values, view)[...] = t.detach().numpy()
                encoder.upload_buffer_data(p.values.storage, 4 * int(p.values.offset), values)
            grads = np.zeros(p.size, np.float32)
            for t, view, _ in linked:
                if t.grad is not None:
                    _window(grads, view)[...] = t.grad.detach().numpy()
            encoder.upload_buffer_data(p.grad.storage, 4 * int(p.grad.offset), grads)

    def zero_grad(self) -> bool:
        """The torch side of ``optimizer.zero_grad()``: gradients of their own become None (aliases of the arena's
        are zeroed by the optimiser's fill; copy mode zeroes the torch gradients). Returns True when no fill is
        needed: shared mode, every Parameter of the arena a TorchModule's, whose gradients all become None (its
        next backward, or else the step, clears the arena's gradient first, as for a None ``.grad``)."""
        lazy = self.mode == placement.SHARED and self.complete and all(
            not alias for _, linked in self.entries for _, _, alias in linked)
        for _, linked in self.entries:
            for t, _, alias in linked:
                if self.mode == placement.COPY and t.grad is not None:
                    t.grad.zero_()
                elif not alias:
                    t.grad = None
        return lazy

    def after_step(self) -> None:
        """Point (shared) or copy (copy mode, after the step's submission: waits for the GPU) the torch parameters
        at the arena's current values; gradients are zero afterwards (shared: a TorchModule parameter's ``.grad``
        that views the arena's gradient stays, as the aliases do; one of its own becomes None)."""
        with torch.no_grad():
            for p, linked in self.entries:
                if self.mode == placement.SHARED:
                    windows = self._windows[id(p)]
                    if p.values is not self._sources.get(id(p)):
                        self._sources[id(p)] = p.values
                        for (t, _, _), window in zip(linked, windows.of(p.values)):
                            t.data = window
                    grads = windows.of(p.grad)
                    if p.grad is not self._grad_sources.get(id(p)):
                        self._grad_sources[id(p)] = p.grad
                        for (t, _, alias), window in zip(linked, grads):
                            if alias:
                                t.grad = window
                    for (t, _, alias), window in zip(linked, grads):
                        if not alias and t.grad is not None and not _same_memory(t.grad, window):
                            t.grad = None
                    continue
                values = p.numpy().reshape(-1)
                for t, view, _ in linked:
                    t.copy_(torch.from_numpy(np.ascontiguousarray(_window(values, view))))
                    if t.grad is not None:
                        t.grad.zero_()
                self._versions[id(p)] = tuple(t._version for t, _, _ in linked)


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same elements (same first element and strides)."""
    return a.data_ptr() == b.data_ptr() and a.stride() == b.stride()


def _window(flat: np.ndarray, view: ParameterView) -> np.ndarray:
    """``view``'s window of a host flat array, writable in place."""
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[view.first:], view.shape, tuple(s * item for s in view.strides))

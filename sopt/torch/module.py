"""TorchModule: any sopt.nn module (Linear, MLP, FullyFusedMLP, encodings, HashGridEncoding, Sequential) as a
``torch.nn.Module``.

::

    net = sopt.torch.TorchModule(sopt.nn.FullyFusedMLP(3, 1, hidden_features=64, hidden_layers=2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for x, target in batches:
        loss = torch.nn.functional.mse_loss(net(x), target)   # sopt's kernels forward and backward
        opt.zero_grad(); loss.backward(); opt.step()           # torch autograd and a torch optimiser

``forward(x)`` takes a float32 tensor ``(..., in_features)`` and returns ``(..., out_features)``; ``backward``
runs sopt's backward kernels through a ``torch.autograd.Function`` into ``x.grad`` and the parameters' ``.grad``.
A NaN in a row of ``x`` makes that row's output NaN, as torch's layers do; an empty batch (0 rows) gives an empty
``(0, out_features)`` output and, backward, an empty ``x.grad`` and zero parameter gradients, with no GPU work.

Parameters: torch Parameters named as ``module.named_parameters()`` (``"0.weight"``; a FullyFusedMLP's per-layer
``"0.weight"``, ``"0.bias"``, ... are strided windows of its one flat Parameter, as in sopt), so ``state_dict()``,
``load_state_dict``, ``torch.save``, torch optimisers, schedulers and ``torch.amp.GradScaler`` work on them.
On CUDA (sopt sharing torch's context, see sopt.torch.placement) they are zero-copy views of the sopt
Parameters' memory: an update by a torch optimiser is what the sopt module computes with next, with no copy.
On Vulkan they are CPU tensors mirrored into sopt's memory: changed ones are uploaded before a forward, and
values a sopt optimiser changed are downloaded (a warning says so once).

Gradients: sopt's own Parameter gradients (``p.grad``) serve the wrapper. On CUDA, where torch would do nothing
but add the gradient into ``.grad`` (a ``loss.backward()`` with no hooks on the parameters and no
``create_graph``), no copy is made: a parameter whose ``.grad`` is None gets the zero-copy view of its window of
``p.grad`` (cleared first), and one whose ``.grad`` already is that view has sopt's backward add into it. So
torch optimisers, ``zero_grad`` (to None or to zero), ``GradScaler`` and gradient clipping see ordinary ``.grad``
tensors, a module called twice per step gets the sum, and a step costs no gradient copies. Such a ``.grad``
aliases sopt's memory: sopt computing a gradient of the same module natively (``vjp``, a sopt Trainer) writes
there too, and a reference to an old ``.grad`` kept across ``zero_grad(set_to_none=True)`` sees the next
step's values. Otherwise (``torch.autograd.grad``, hooks, a ``.grad`` tensor of the user's, Vulkan) each backward
clears ``p.grad``, accumulates there and hands torch one new tensor per sopt Parameter (its windows), which
torch sums into ``.grad`` as for any torch module.

Host work per call, on CUDA: one submission for the forward and one for the backward (everything recorded on a
pooled sopt tape), a device copy of the input in and of the output out (the output's array is reused by the
next call, so torch gets a copy), and of ``dL/doutput`` in; the parameters' and gradients' torch views are made
once and cached.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from sopt.autodiff import tape as tp
from sopt.compat import torch as compat_torch
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter
from sopt.torch import arrays, placement
from sopt.torch.parameter_views import ParameterView, WindowCache, parameter_views
from sopt.torch.session import Session


# How one sopt Parameter's gradient reaches torch in a backward (TorchModule._grad_plan):
ACCUMULATE = "accumulate"   # the windows' .grad are views of p.grad: sopt adds into them, nothing is returned
FRESH = "fresh"             # every window's .grad is None: p.grad cleared, sopt adds, the .grad become its views
COPY = "copy"               # one new tensor holds p.grad; its windows go back to torch, which accumulates them


class _Mirror:
    """The torch side of one sopt Parameter: its windows (indices into the module's views), the tensor standing
    for its flat values (shared: views of the current array, cached per array; copy mode: a CPU copy, with what
    was last synchronised)."""

    def __init__(self, p: Parameter, mode: str, keys: list[int], views: list[ParameterView]) -> None:
        self.p = p
        self.keys = keys
        self.source: Any = None       # shared: the sopt array the parameters' .data view
        self.p_version = -1           # copy: p.version when last synchronised
        self.torch_versions: tuple[int, ...] = ()
        self.windows = WindowCache([views[k] for k in keys])   # shared: windows of p.values' sides, p.grad
        if mode == placement.SHARED:
            self.source = p.values
            self.flat = arrays.torch_view(p.values).view(-1)
        else:
            self.flat = torch.from_numpy(p.numpy().reshape(-1).copy())
            self.p_version = p.version


# sopt Parameter -> the TorchModule whose parameters' .grad view its gradient (one at a time: before another
# clears that gradient, those .grad become copies, see TorchModule._unalias)
_grad_viewers: "weakref.WeakKeyDictionary[Parameter, weakref.ref[TorchModule]]" = weakref.WeakKeyDictionary()


class TorchModule(torch.nn.Module):
    """``module`` (a sopt.nn Module) as a torch.nn.Module; see the module docstring."""

    def __init__(self, module: Module) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise ValueError(f"TorchModule wraps a sopt.nn Module, got {type(module).__name__}")
        self._mode = placement.mode()
        if self._mode == placement.COPY:
            placement.warn_copies()
        self.sopt_module = module
        self._views: list[ParameterView] = parameter_views(module)
        keys: dict[int, list[int]] = {}
        for k, view in enumerate(self._views):
            keys.setdefault(id(view.parameter), []).append(k)
        self._mirrors: dict[int, _Mirror] = {}
        for k, view in enumerate(self._views):
            if id(view.parameter) not in self._mirrors:
                self._mirrors[id(view.parameter)] = _Mirror(view.parameter, self._mode, keys[id(view.parameter)],
                                                            self._views)
        self._mirror_list = list(self._mirrors.values())
        self._params: list[torch.nn.Parameter] = []
        for view in self._views:
            mirror = self._mirrors[id(view.parameter)]
            param = torch.nn.Parameter(view.of(mirror.flat))
            owner: torch.nn.Module = self
            *path, leaf = view.key.split(".")
            for part in path:   # torch names may not contain dots: "1.0.weight" is child "1", its child "0"
                child = owner._modules.get(part)
                if child is None:
                    child = torch.nn.Module()
                    owner.add_module(part, child)
                owner = child
            owner.register_parameter(leaf, param)
            self._params.append(param)
        for mirror in self._mirror_list:
            mirror.torch_versions = self._versions(mirror)
        from sopt.torch.registry import register_module_parameters
        register_module_parameters(self)

    # -- parameters ---------------------------------------------------------------------------------------------
    def parameter_pairs(self) -> list[tuple[torch.nn.Parameter, ParameterView]]:
        """(torch parameter, the sopt window it is) in registration order."""
        return list(zip(self._params, self._views))

    def _versions(self, mirror: _Mirror) -> tuple[int, ...]:
        return tuple(self._params[k]._version for k in mirror.keys)

    def sync(self) -> None:
        """Make the sopt Parameters and the torch parameters agree (before every forward; see the module
        docstring): shared, re-view a Parameter that moved (into a sopt optimiser's arena, or to its other side);
        copy mode, download what sopt changed, else upload what torch changed."""
        for mirror in self._mirror_list:
            p = mirror.p
            if self._mode == placement.SHARED:
                values = p.values
                if values is not mirror.source:
                    mirror.source = values
                    mirror.flat = arrays.torch_view(values).view(-1)
                    for k, window in zip(mirror.keys, mirror.windows.of(values)):
                        t = self._params[k]
                        if t.data_ptr() != window.data_ptr():   # a sopt optimiser's link may have moved it already
                            t.data = window
                continue
            with torch.no_grad():
                if p.version != mirror.p_version:
                    mirror.flat.copy_(torch.from_numpy(p.numpy().reshape(-1)))
                    for k in mirror.keys:
                        t, v = self._params[k], self._views[k]
                        if t.data_ptr() != v.of(mirror.flat).data_ptr():
                            t.copy_(v.of(mirror.flat))
                elif self._versions(mirror) != mirror.torch_versions:
                    for k in mirror.keys:   # a parameter whose .data was replaced
                        t, v = self._params[k], self._views[k]
                        if t.data_ptr() != v.of(mirror.flat).data_ptr():
                            v.of(mirror.flat).copy_(t)
                    p.load(mirror.flat.numpy().reshape(p.shape))
            mirror.p_version = p.version
            mirror.torch_versions = self._versions(mirror)

    # -- calls --------------------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        who = f"TorchModule({type(self.sopt_module).__name__}) input"
        x = placement.check_tensor(x, who)
        features = self.sopt_module.in_features
        if x.dim() < 1 or x.dim() == 1 and features not in (None, 1):
            raise ValueError(f"{who} has shape {tuple(x.shape)}; expected (..., {features or 'F'}), batch first")
        if features is not None and x.shape[-1] != features:
            raise ValueError(f"{who} has {x.shape[-1]} features (shape {tuple(x.shape)}); "
                             f"{type(self.sopt_module).__name__} takes {features}")
        self.sync()
        return _ModuleCall.apply(self, x, *self._params)

    def _forward(self, x: torch.Tensor, need_backward: bool) -> tuple[torch.Tensor, Session, Any, Any, Any]:
        if x.dim() == 2:
            x2, shape = x, None
        else:
            lead = tuple(x.shape[:-1]) if x.dim() > 1 else tuple(x.shape)
            x2 = x.reshape(-1, x.shape[-1]) if x.dim() > 1 else x.reshape(-1, 1)
        session = Session()
        with session.forward() as tape:
            xs = arrays.new_sopt(x2, x.requires_grad and need_backward, tape.encoder)
            ys = self.sopt_module(xs)
            seed = tp.new_tensor(tuple(ys.shape), grads=False) if need_backward else None
        if x.dim() != 2:
            shape = lead + tuple(ys.shape)[1:]
        y = arrays.to_torch(ys, shape)
        if not need_backward:
            session.release()
        return y, session, xs, ys, seed

    def _grad_plan(self, ctx: Any, mirror: _Mirror) -> str:
        """How ``mirror``'s Parameter's gradient reaches torch (ACCUMULATE, FRESH or COPY; see the module
        docstring). In place (ACCUMULATE, FRESH) only where torch would do nothing but add the gradient into
        ``.grad``: shared mode, every window wanted, no graph of the backward (create_graph), no hooks on the
        parameters, and torch's engine accumulating into them (a ``.backward()``, not ``torch.autograd.grad``)."""
        if self._mode != placement.SHARED or torch.is_grad_enabled():
            return COPY
        params, wants, edges = self._params, ctx.needs_input_grad, ctx.next_functions
        windows = None
        grads_none = grads_ours = True
        for i, k in enumerate(mirror.keys):
            t = params[k]
            if not wants[2 + k] or compat_torch.has_gradient_hooks(t):
                return COPY
            try:
                if not compat_torch.engine_will_execute(edges[1 + k][0]):   # tensor inputs only: x, params
                    return COPY
            except RuntimeError:   # torch.autograd.grad(): the gradient is returned, not accumulated
                return COPY
            g = t.grad
            if g is not None:
                grads_none = False
                if windows is None:
                    windows = mirror.windows.of(mirror.p.grad)
                if g is not windows[i]:
                    grads_ours = False
            else:
                grads_ours = False
        return FRESH if grads_none else ACCUMULATE if grads_ours else COPY

    def _unalias(self, p: Parameter) -> None:
        """Before p.grad is cleared: the .grad of any TorchModule's parameters viewing it become copies."""
        ref = _grad_viewers.pop(p, None)
        viewer = ref() if ref is not None else None
        if viewer is None:
            return
        mirror = viewer._mirrors[id(p)]
        for k, window in zip(mirror.keys, mirror.windows.of(p.grad)):
            t = viewer._params[k]
            if t.grad is window:
                t.grad = window.clone()

    def _backward(self, ctx: Any, gy: torch.Tensor) -> tuple[torch.Tensor | None, list[torch.Tensor | None]]:
        session, xs, ys, seed = ctx.session, ctx.xs, ctx.ys, ctx.seed
        plans = [self._grad_plan(ctx, mirror) for mirror in self._mirror_list]
        with session.backward({ys: seed}) as enc:
            arrays.into_sopt(gy.to(torch.float32), seed, enc)
            for mirror, plan in zip(self._mirror_list, plans):
                if plan != ACCUMULATE:   # sopt's backward adds into p.grad
                    if self._mode == placement.SHARED:
                        self._unalias(mirror.p)
                    tp.clear(enc, mirror.p.grad)
        try:
            gx = arrays.to_torch(xs.grad, ctx.x_shape) if ctx.needs_input_grad[1] else None
            grads: list[torch.Tensor | None] = [None] * len(self._views)
            for mirror, plan in zip(self._mirror_list, plans):
                p = mirror.p
                if plan == FRESH:
                    for k, window in zip(mirror.keys, mirror.windows.of(p.grad)):
                        self._params[k].grad = window
                    _grad_viewers[p] = weakref.ref(self)
                if plan != COPY:
                    continue
                # one new tensor per Parameter (torch keeps it, or adds it into .grad); its windows are returned
                flat = (arrays.torch_view(p.grad).view(-1).clone() if self._mode == placement.SHARED
                        else torch.from_numpy(p.grad_numpy().reshape(-1)))
                for k in mirror.keys:
                    if ctx.needs_input_grad[2 + k]:
                        grads[k] = self._views[k].of(flat)
        finally:
            session.release()
        return gx, grads

    def extra_repr(self) -> str:
        return repr(self.sopt_module)


class _ModuleCall(torch.autograd.Function):
    """One TorchModule call: sopt's forward now, its backward when torch asks (a Session's tape between)."""

    @staticmethod
    def forward(ctx: Any, owner: TorchModule, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        if x.numel() == 0:   # SlangPy makes no empty array: an empty batch is answered here, with no GPU work
            ctx.owner, ctx.session, ctx.x_shape = owner, None, tuple(x.shape)
            return x.new_empty(_output_shape(owner.sopt_module, x))
        need = any(ctx.needs_input_grad[1:])
        y, session, xs, ys, seed = owner._forward(x, need)
        ctx.owner, ctx.session, ctx.xs, ctx.ys, ctx.seed, ctx.x_shape = owner, session, xs, ys, seed, tuple(x.shape)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
        if ctx.session is None:   # an empty batch: dL/dx is empty, and no row adds to a parameter's gradient
            wants = ctx.needs_input_grad
            gx = gy.new_zeros(ctx.x_shape) if wants[1] else None
            return (None, gx, *(torch.zeros_like(p) if wants[2 + k] else None
                                for k, p in enumerate(ctx.owner._params)))
        gx, grads = ctx.owner._backward(ctx, gy.contiguous())
        return (None, gx, *grads)


def _output_shape(module: Module, x: torch.Tensor) -> tuple[int, ...]:
    """The shape of ``module``'s output for the input ``x`` (..., in_features): (..., out_features), a 1-d
    ``x`` of N rows giving (N, out_features); a module that keeps the feature count keeps ``x``'s."""
    lead = tuple(x.shape[:-1]) if x.dim() > 1 else tuple(x.shape)
    width = module.out_features if module.out_features is not None else (x.shape[-1] if x.dim() > 1 else 1)
    return lead + (width,)

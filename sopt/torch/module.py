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

Parameters: torch Parameters named as ``module.state_dict()``'s keys (``"0.weight"``; a FullyFusedMLP's per-layer
``"0.weight"``, ``"0.bias"``, ... are strided windows of its one flat Parameter), so ``state_dict()``,
``load_state_dict``, ``torch.save``, torch optimisers, schedulers and ``torch.amp.GradScaler`` work on them.
On CUDA (sopt sharing torch's context, see sopt.torch.placement) they are zero-copy views of the sopt
Parameters' memory: an update by a torch optimiser is what the sopt module computes with next, with no copy.
On Vulkan they are CPU tensors mirrored into sopt's memory: changed ones are uploaded before a forward, and
values a sopt optimiser changed are downloaded (a warning says so once).

sopt's own Parameter gradients serve the wrapper as scratch: each backward clears them, accumulates there and
hands copies to torch, which sums them into ``.grad`` as for any torch module (a module called twice per step
gets the sum).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from sopt import tape as tp
from sopt.nn.module import Module
from sopt.parameter import Parameter
from sopt.torch import arrays, placement
from sopt.torch.parameter_views import ParameterView, parameter_views
from sopt.torch.session import Session


class _Mirror:
    """The torch tensor standing for one sopt Parameter's flat values: its zero-copy view (shared) or a CPU copy
    (copy mode), with what was last synchronised."""

    def __init__(self, p: Parameter, mode: str) -> None:
        self.p = p
        self.source: Any = None       # shared: the sopt array ``flat`` views
        self.p_version = -1           # copy: p.version when last synchronised
        self.torch_versions: tuple[int, ...] = ()
        if mode == placement.SHARED:
            self.source = p.values
            self.flat = arrays.torch_view(p.values).view(-1)
        else:
            self.flat = torch.from_numpy(p.numpy().reshape(-1).copy())
            self.p_version = p.version


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
        self._mirrors: dict[int, _Mirror] = {}
        self._params: list[torch.nn.Parameter] = []
        for view in self._views:
            mirror = self._mirrors.get(id(view.parameter))
            if mirror is None:
                mirror = self._mirrors[id(view.parameter)] = _Mirror(view.parameter, self._mode)
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
        for mirror in self._mirrors.values():
            mirror.torch_versions = self._versions(mirror)
        from sopt.torch.registry import register_module_parameters
        register_module_parameters(self)

    # -- parameters ---------------------------------------------------------------------------------------------
    def parameter_pairs(self) -> list[tuple[torch.nn.Parameter, ParameterView]]:
        """(torch parameter, the sopt window it is) in registration order."""
        return list(zip(self._params, self._views))

    def _versions(self, mirror: _Mirror) -> tuple[int, ...]:
        return tuple(t._version for t, v in zip(self._params, self._views) if v.parameter is mirror.p)

    def sync(self) -> None:
        """Make the sopt Parameters and the torch parameters agree (before every forward; see the module
        docstring): shared, re-view a Parameter that moved (into a sopt optimiser's arena, or to its other side);
        copy mode, download what sopt changed, else upload what torch changed."""
        for mirror in self._mirrors.values():
            p = mirror.p
            if self._mode == placement.SHARED:
                if p.values is not mirror.source:
                    mirror.source = p.values
                    mirror.flat = arrays.torch_view(p.values).view(-1)
                    for t, v in zip(self._params, self._views):
                        if v.parameter is p:
                            t.data = v.of(mirror.flat)
                continue
            with torch.no_grad():
                if p.version != mirror.p_version:
                    mirror.flat.copy_(torch.from_numpy(p.numpy().reshape(-1)))
                    for t, v in zip(self._params, self._views):
                        if v.parameter is p and t.data_ptr() != v.of(mirror.flat).data_ptr():
                            t.copy_(v.of(mirror.flat))
                elif self._versions(mirror) != mirror.torch_versions:
                    for t, v in zip(self._params, self._views):   # a parameter whose .data was replaced
                        if v.parameter is p and t.data_ptr() != v.of(mirror.flat).data_ptr():
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
        lead = tuple(x.shape[:-1]) if x.dim() > 1 else tuple(x.shape)
        x2 = x.reshape(-1, x.shape[-1]) if x.dim() > 1 else x.reshape(-1, 1)
        session = Session()
        with session.forward() as tape:
            xs = arrays.new_sopt(x2, x.requires_grad and need_backward, tape.encoder)
            ys = self.sopt_module(xs)
            seed = tp.new_tensor(tuple(ys.shape), grads=False) if need_backward else None
        y = arrays.to_torch(ys, lead + tuple(ys.shape)[1:])
        if not need_backward:
            session.release()
        return y, session, xs, ys, seed

    def _backward(self, ctx: Any, gy: torch.Tensor) -> tuple[torch.Tensor | None, list[torch.Tensor | None]]:
        session, xs, ys, seed = ctx.session, ctx.xs, ctx.ys, ctx.seed
        with session.backward({ys: seed}) as enc:
            arrays.into_sopt(gy.to(torch.float32), seed, enc)
            for mirror in self._mirrors.values():
                tp.clear(enc, mirror.p.grad)
        try:
            gx = arrays.to_torch(xs.grad, ctx.x_shape) if ctx.needs_input_grad[1] else None
            flats: dict[int, torch.Tensor] = {}
            grads: list[torch.Tensor | None] = []
            for k, view in enumerate(self._views):
                if not ctx.needs_input_grad[2 + k]:
                    grads.append(None)
                    continue
                p = view.parameter
                flat = flats.get(id(p))
                if flat is None:
                    flat = flats[id(p)] = (arrays.torch_view(p.grad).view(-1) if self._mode == placement.SHARED
                                           else torch.from_numpy(p.grad_numpy().reshape(-1)))
                grads.append(view.of(flat).clone())
        finally:
            session.release()
        return gx, grads

    def extra_repr(self) -> str:
        return repr(self.sopt_module)


class _ModuleCall(torch.autograd.Function):
    """One TorchModule call: sopt's forward now, its backward when torch asks (a Session's tape between)."""

    @staticmethod
    def forward(ctx: Any, owner: TorchModule, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        need = any(ctx.needs_input_grad[1:])
        y, session, xs, ys, seed = owner._forward(x, need)
        ctx.owner, ctx.session, ctx.xs, ctx.ys, ctx.seed, ctx.x_shape = owner, session, xs, ys, seed, tuple(x.shape)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
        gx, grads = ctx.owner._backward(ctx, gy.contiguous())
        return (None, gx, *grads)

"""Sequential: modules applied one after the other, torch.nn.Sequential's naming ("0.weight", "1.bias", ...)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterator

import slangpy as spy

from sopt.nn.batch import CACHED_SIZES, as_batch, check_output, has_grad
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter


class Sequential(Module):
    """``y = m_k(... m_1(m_0(x)))``.

    ``forward`` keeps the intermediate outputs of the last call for each batch size N (each module reuses
    its own output buffer per N), and ``backward(x, y)`` walks them in reverse: module i reads dL/d(out_i)
    from its output's ``.grad`` (written by module i+1) and writes dL/d(in_i) into its input's ``.grad``.
    An intermediate gradient nobody upstream needs (no parameters before it and no gradient wanted for x)
    is not computed: that module gets its input without a gradient buffer.

    Parameters are named ``"<index>.<name>"`` (e.g. ``"0.weight"``), nested Sequentials ``"1.0.weight"``.
    A module instance may appear more than once (shared weights, listed once by ``named_parameters``) only on
    a ``sopt.Tape``, where each call owns its output; the eager ``forward`` refuses it (the calls would share
    one output buffer).
    ``in_features`` / ``out_features`` are those of the first / last module with a fixed feature count
    (activations preserve theirs).
    """

    def __init__(self, *modules: Module) -> None:
        if not modules:
            raise ValueError("Sequential needs at least one module")
        seen: set[int] = set()
        self._repeated: int | None = None   # index of the first module instance that appears a second time
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise ValueError(f"Sequential: argument {i} must be a sopt.nn Module, got {type(m).__name__}")
            if id(m) in seen and self._repeated is None:
                self._repeated = i
            seen.add(id(m))
        width = None
        for i, m in enumerate(modules):
            if m.in_features is not None and width is not None and m.in_features != width:
                raise ValueError(f"Sequential: module {i} ({m!r}) takes {m.in_features} features but the module before "
                                 f"it produces {width}")
            if m.out_features is not None:
                width = m.out_features
        self.modules: tuple[Module, ...] = tuple(modules)
        # an encoding writes its output in the layout the module after it reads best (tiny-cuda-nn's
        # NetworkWithInputEncoding does the same)
        for m, after in zip(modules, modules[1:]):
            if hasattr(m, "output_layout"):
                m.output_layout = after.preferred_input_layout
        self.in_features = next((m.in_features for m in modules if m.in_features is not None), None)
        self.out_features = width
        self._has_params = [any(True for _ in m.named_parameters()) for m in modules]
        self._traces: OrderedDict[int, list[spy.Tensor]] = OrderedDict()

    @property
    def preferred_input_layout(self) -> str:   # type: ignore[override]
        return self.modules[0].preferred_input_layout

    def __len__(self) -> int:
        return len(self.modules)

    def __getitem__(self, index: int) -> Module:
        return self.modules[index]

    def __iter__(self) -> Iterator[Module]:
        return iter(self.modules)

    def train(self, mode: bool = True) -> "Sequential":
        """Training or evaluation mode for this container and every module in it (torch's semantics)."""
        self.training = mode
        for m in self.modules:
            m.train(mode)
        return self

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for i, m in enumerate(self.modules):
            if id(m) in seen:
                continue   # a shared module's Parameters are listed under its first index
            seen.add(id(m))
            for name, p in m.named_parameters():
                yield f"{i}.{name}", p

    def forward(self, x: Any, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        if self._repeated is not None:
            raise ValueError(f"Sequential: module {self._repeated} ({self.modules[self._repeated]!r}) appears twice, "
                             "so outside a tape its two calls would share one output buffer; run it on a sopt.Tape "
                             "(with tape: y = seq(x)), where every call owns its output")
        x = as_batch(x, self.in_features, "Sequential")
        trace = [x]
        for m in self.modules:
            trace.append(m.forward(trace[-1], encoder))
        n = x.shape[0]
        self._traces[n] = trace
        self._traces.move_to_end(n)
        while len(self._traces) > CACHED_SIZES:
            self._traces.popitem(last=False)
        return trace[-1]

    def tape_forward(self, tape: Any, x: Any) -> spy.Tensor:
        """On a tape each child's call is recorded on its own (the tape then runs their backward in reverse)."""
        x = as_batch(x, self.in_features, "Sequential")
        for m in self.modules:
            x = m(x)
        return x

    def backward(self, x: Any, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        x = as_batch(x, self.in_features, "Sequential")
        n = x.shape[0]
        trace = self._traces.get(n)
        if trace is None or trace[-1] is not y:
            raise ValueError(f"Sequential.backward: (x, y) are not the input and output of the last forward() with "
                             f"N = {n}; call backward with the x given to forward and the y it returned")
        check_output(y, n, trace[-1].shape[1], "Sequential")
        # dL/d(input of module i) is needed when x wants a gradient or a module before i has parameters
        needed = has_grad(x)
        wanted = []
        for i, m in enumerate(self.modules):
            wanted.append(needed)
            needed = needed or self._has_params[i]
        for i in reversed(range(len(self.modules))):
            inp = x if i == 0 else (trace[i] if wanted[i] else trace[i].detach())
            self.modules[i].backward(inp, trace[i + 1], encoder)

    def __repr__(self) -> str:
        inner = "\n".join(f"  ({i}): {m!r}" for i, m in enumerate(self.modules))
        return f"{type(self).__name__}(\n{inner}\n)"

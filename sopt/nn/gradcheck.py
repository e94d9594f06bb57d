"""gradcheck: a module's backward pass against central finite differences of its forward pass.

For a fixed random cotangent ``dy`` (N(0, 1), seeded), the scalar ``L(x, params) = sum(dy * module(x))``
has gradient ``vjp(module, x, dy)``. For sampled coordinates c of the input and of every parameter,
the numeric derivative is ``(L(c + eps) - L(c - eps)) / h`` with ``h`` the actual float32 step
``fl(c + eps) - fl(c - eps)``; ``L`` differences are accumulated in float64 on the host over the float32
outputs, so only outputs that changed contribute rounding noise. A check passes when
``|analytic - numeric| <= atol + rtol * |numeric|``.

Finite differences are meaningless across kinks (ReLU at 0, hash grid cell faces): choose inputs away
from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sopt.nn.module import Module
from sopt.nn.vjp import forward_numpy, unique_parameters, vjp
from sopt.utils.validation import as_float32_array, check_float, check_int


@dataclass(frozen=True)
class GradcheckEntry:
    """One checked coordinate: ``where`` (e.g. ``"input[3, 1]"``, ``"param '0.weight'[2, 5]"``)."""

    where: str
    analytic: float
    numeric: float
    abs_error: float
    rel_error: float   # abs_error / max(|analytic|, |numeric|), 0 when both are 0
    ok: bool

    def __str__(self) -> str:
        return (f"{self.where}: analytic {self.analytic:.6g}, numeric {self.numeric:.6g} (abs error "
                f"{self.abs_error:.3g}, rel error {self.rel_error:.3g}){'' if self.ok else '  FAIL'}")


@dataclass
class GradcheckResult:
    """Outcome of :func:`gradcheck`: ``ok`` when every check passed; ``worst`` is the check closest to (or
    furthest past) its tolerance; ``entries`` holds every check."""

    ok: bool
    max_abs_error: float
    max_rel_error: float
    worst: GradcheckEntry | None
    entries: list[GradcheckEntry] = field(repr=False)
    eps: float = 1e-3
    atol: float = 1e-3
    rtol: float = 1e-2
    worst_by_parameter: dict[str, float] = field(default_factory=dict)   # name -> worst rel error (objectives)

    @property
    def failures(self) -> list[GradcheckEntry]:
        return [e for e in self.entries if not e.ok]

    def __str__(self) -> str:
        head = (f"gradcheck {'passed' if self.ok else 'FAILED'}: {len(self.entries)} checks, "
                f"{len(self.failures)} failed (eps={self.eps:g}, atol={self.atol:g}, rtol={self.rtol:g}); "
                f"max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}")
        lines = [head]
        if self.worst_by_parameter:
            lines.append("  worst rel error per parameter: " + ", ".join(f"{k} {v:.3g}" for k, v in
                                                                        self.worst_by_parameter.items()))
        if self.worst is not None:
            lines.append(f"  worst: {self.worst}")
        lines += [f"  {e}" for e in self.failures[:10] if e is not self.worst]
        if len(self.failures) > 10:
            lines.append(f"  ... and {len(self.failures) - 10} more failures")
        return "\n".join(lines)


class GradcheckError(AssertionError):
    """Raised by ``gradcheck(..., raise_on_fail=True)``; ``.result`` holds the GradcheckResult."""

    def __init__(self, result: GradcheckResult) -> None:
        super().__init__(str(result))
        self.result = result


def gradcheck(module: Any, x: Any = None, eps: float = 1e-3, atol: float = 1e-3, rtol: float = 1e-2,
              n_checks: int = 12, seed: int = 0, check_inputs: bool = True, check_params: bool = True,
              raise_on_fail: bool = False) -> GradcheckResult:
    """Compare ``module``'s backward pass with central differences at ``x`` (N, in_features); or, given a tape
    objective and its Parameters (``gradcheck(objective, params)``), the tape's gradients of the objective's
    loss (see :func:`gradcheck_objective`).

    ``n_checks`` coordinates are checked per tensor (the input, each parameter): half drawn among those
    with a non-zero analytic gradient (a hash grid table's gradient is mostly zero), the rest uniformly;
    all of them when the tensor is that small. Parameter values and gradients are restored afterwards.
    Returns a :class:`GradcheckResult`; raises :class:`GradcheckError` on failure only when
    ``raise_on_fail``. Waits for the GPU (two forward passes per check).
    """
    if not isinstance(module, Module) and callable(module):
        return gradcheck_objective(module, x, eps=eps, atol=atol, rtol=rtol, n_checks=n_checks, seed=seed,
                                   raise_on_fail=raise_on_fail)
    if x is None:
        raise ValueError("gradcheck(module, x): x (a batch of inputs) is missing")
    eps = check_float(eps, "eps", low=0.0, low_inclusive=False)
    atol = check_float(atol, "atol", low=0.0)
    rtol = check_float(rtol, "rtol", low=0.0)
    n_checks = check_int(n_checks, "n_checks", low=1)
    x32 = as_float32_array(x, "gradcheck x")
    rng = np.random.default_rng(seed)
    y0 = forward_numpy(module, x32)
    dy = rng.standard_normal(y0.shape).astype(np.float32)
    _, dx, grads = vjp(module, x32, dy)
    dy64 = dy.astype(np.float64)

    def loss_change(y_plus: np.ndarray, y_minus: np.ndarray) -> float:
        return float(np.sum(dy64 * (y_plus.astype(np.float64) - y_minus.astype(np.float64))))

    entries: list[GradcheckEntry] = []
    if check_inputs:
        def eval_input(values: np.ndarray) -> np.ndarray:
            return forward_numpy(module, values)
        entries += _check_tensor("input", x32, dx, eval_input, loss_change, eps, atol, rtol, n_checks, rng)
    if check_params:
        for name, p in unique_parameters(module):
            original = p.numpy()

            def eval_param(values: np.ndarray, p=p) -> np.ndarray:
                p.load(values)
                return forward_numpy(module, x32)
            try:
                entries += _check_tensor(f"param '{name}'", original, grads[name], eval_param, loss_change, eps,
                                         atol, rtol, n_checks, rng)
            finally:
                p.load(original)
    result = _summarise(entries, eps, atol, rtol)
    if raise_on_fail and not result.ok:
        raise GradcheckError(result)
    return result


def _check_tensor(label: str, values: np.ndarray, analytic: np.ndarray, evaluate: Callable[[np.ndarray], np.ndarray],
                  loss_change: Callable[[np.ndarray, np.ndarray], float], eps: float, atol: float, rtol: float,
                  n_checks: int, rng: np.random.Generator) -> list[GradcheckEntry]:
    flat = values.ravel()
    entries = []
    for index in _pick(analytic.ravel(), n_checks, rng):
        plus, minus = flat.copy(), flat.copy()
        plus[index] = np.float32(np.float64(flat[index]) + eps)
        minus[index] = np.float32(np.float64(flat[index]) - eps)
        h = np.float64(plus[index]) - np.float64(minus[index])
        numeric = loss_change(evaluate(plus.reshape(values.shape)), evaluate(minus.reshape(values.shape))) / h
        a = float(analytic.ravel()[index])
        err = abs(a - numeric)
        scale = max(abs(a), abs(numeric))
        where = f"{label}[{', '.join(str(int(i)) for i in np.unravel_index(index, values.shape))}]"
        ok = err <= atol + rtol * abs(numeric)
        entries.append(GradcheckEntry(where, a, float(numeric), float(err), float(err / scale) if scale > 0 else 0.0,
                                      bool(ok)))
    return entries


def _pick(analytic: np.ndarray, n: int, rng: np.random.Generator) -> list[int]:
    if analytic.size <= n:
        return list(range(analytic.size))
    nonzero = np.flatnonzero(analytic)
    chosen = list(rng.choice(nonzero, size=min(len(nonzero), (n + 1) // 2), replace=False)) if len(nonzero) else []
    rest = np.setdiff1d(np.arange(analytic.size), chosen)
    chosen += list(rng.choice(rest, size=n - len(chosen), replace=False))
    return sorted(int(i) for i in chosen)


def _summarise(entries: list[GradcheckEntry], eps: float, atol: float, rtol: float) -> GradcheckResult:
    if not entries:
        return GradcheckResult(True, 0.0, 0.0, None, [], eps, atol, rtol)
    worst = max(entries, key=lambda e: e.abs_error / (atol + rtol * abs(e.numeric)) if atol + rtol * abs(e.numeric) > 0
                else (np.inf if e.abs_error > 0 else 0.0))
    return GradcheckResult(all(e.ok for e in entries), max(e.abs_error for e in entries),
                           max(e.rel_error for e in entries), worst, entries, eps, atol, rtol)


def gradcheck_objective(objective: Callable[..., Any], params: Any, eps: float = 1e-3, atol: float = 1e-3,
                        rtol: float = 1e-2, n_checks: int = 12, seed: int = 0,
                        raise_on_fail: bool = False) -> GradcheckResult:
    """Central differences of any tape objective ``objective(tape, step) -> loss`` (as the Trainer takes; called
    with step 0) against ``tape.backward``'s gradients, for sampled coordinates of each Parameter in ``params``
    (a Parameter, a list, a dict or an object with ``parameters()``).

    The loss is read as float64 on the host from its float32 value (a sum of many float32 terms is only that
    precise: choose ``eps`` so that ``eps * |gradient|`` is well above the loss's rounding). The result's
    ``worst_by_parameter`` maps each Parameter's name to its worst relative error. Parameter values and
    gradients are restored afterwards. Waits for the GPU.
    """
    from sopt.autodiff.parameter import parameters_of
    from sopt.autodiff.tape import Tape, loss_scalar
    eps = check_float(eps, "eps", low=0.0, low_inclusive=False)
    atol = check_float(atol, "atol", low=0.0)
    rtol = check_float(rtol, "rtol", low=0.0)
    n_checks = check_int(n_checks, "n_checks", low=1)
    if params is None:
        raise ValueError("gradcheck(objective, params): params (the Parameters to check) is missing")
    plist = list({id(p): p for p in parameters_of(params)}.values())
    rng = np.random.default_rng(seed)
    saved_grads = [p.grad_numpy() for p in plist]
    originals = [p.numpy() for p in plist]
    tape = Tape()

    def evaluate(backward: bool) -> float:
        with tape:
            loss = objective(tape, 0)
        if backward:
            tape.backward(loss)
        tape.submit()
        return loss_scalar(loss)

    entries: list[GradcheckEntry] = []
    worst: dict[str, float] = {}
    try:
        for p in plist:
            p.zero_grad()
        evaluate(True)
        analytic = [p.grad_numpy() for p in plist]
        for p, original, grad in zip(plist, originals, analytic):
            def eval_param(values: np.ndarray, p=p) -> float:
                p.load(values)
                return evaluate(False)
            found = _check_tensor(f"param '{p.name}'", original, grad, eval_param, lambda a, b: a - b, eps, atol,
                                  rtol, n_checks, rng)
            p.load(original)
            worst[p.name] = max((e.rel_error for e in found), default=0.0)
            entries += found
    finally:
        for p, original, g in zip(plist, originals, saved_grads):
            p.load(original)
            p.set_grad(g)
    result = _summarise(entries, eps, atol, rtol)
    result.worst_by_parameter = worst
    if raise_on_fail and not result.ok:
        raise GradcheckError(result)
    return result

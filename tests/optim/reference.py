"""float64 numpy implementations of torch.optim's update equations (single-tensor code paths), used as the
reference the Slang kernels are checked against. Written from torch/optim/{sgd,adam,adamw,rmsprop,adagrad}.py
and, for Lion, from Chen et al. 2023 (Algorithm 2) with lion-pytorch's decoupled weight decay."""

from __future__ import annotations

import numpy as np


class ReferenceOptimizer:
    """Steps a list of float64 arrays with per-parameter state, like torch with zero_grad(set_to_none=False)."""

    def __init__(self, kind: str, params: list[np.ndarray], max_grad_norm: float | None = None, **h) -> None:
        self.kind, self.h, self.max_grad_norm = kind, h, max_grad_norm
        self.params = [np.array(p, np.float64) for p in params]
        self.state = [dict() for _ in params]
        self.t = 0

    def step(self, grads: list[np.ndarray]) -> None:
        grads = [np.array(g, np.float64) for g in grads]
        if any(not np.isfinite(g).all() for g in grads):
            return  # sopt skips the whole step
        if self.max_grad_norm is not None:
            norm = np.sqrt(sum((g**2).sum() for g in grads))
            coef = min(self.max_grad_norm / (norm + 1e-6), 1.0)
            grads = [g * coef for g in grads]
        self.t += 1
        for p, g, s in zip(self.params, grads, self.state):
            getattr(self, "_" + self.kind)(p, g, s)

    def _sgd(self, p, g, s):
        h = self.h
        lr, momentum, dampening = h.get("lr", 1e-3), h.get("momentum", 0.0), h.get("dampening", 0.0)
        wd, nesterov, maximize = h.get("weight_decay", 0.0), h.get("nesterov", False), h.get("maximize", False)
        g = -g if maximize else g
        if wd:
            g = g + wd * p
        if momentum:
            if "buf" not in s:
                s["buf"] = g.copy()
            else:
                s["buf"] = momentum * s["buf"] + (1 - dampening) * g
            g = g + momentum * s["buf"] if nesterov else s["buf"]
        p -= lr * g

    def _adam(self, p, g, s, decoupled=False):
        h = self.h
        lr, (b1, b2), eps = h.get("lr", 1e-3), h.get("betas", (0.9, 0.999)), h.get("eps", 1e-8)
        wd = h.get("weight_decay", 1e-2 if decoupled else 0.0)
        # lazy (torch.optim.SparseAdam's rule): elements whose gradient is 0 keep p and every moment
        kept = g == 0 if h.get("lazy", False) else np.zeros(p.shape, bool)
        before = {"p": p.copy(), **{k: v.copy() for k, v in s.items()}}
        g = -g if h.get("maximize", False) else g
        if decoupled:
            p *= 1 - lr * wd
        elif wd:
            g = g + wd * p
        m = s.setdefault("m", np.zeros_like(p))
        v = s.setdefault("v", np.zeros_like(p))
        m += (g - m) * (1 - b1)
        v *= b2
        v += (1 - b2) * g * g
        bc1, bc2 = 1 - b1**self.t, 1 - b2**self.t
        if h.get("amsgrad", False):
            vmax = s.setdefault("vmax", np.zeros_like(p))
            np.maximum(vmax, v, out=vmax)
            denom = np.sqrt(vmax) / np.sqrt(bc2) + eps
        else:
            denom = np.sqrt(v) / np.sqrt(bc2) + eps
        p -= lr / bc1 * m / denom
        for name, array in (("p", p), *s.items()):
            array[kept] = before.get(name, np.zeros_like(p))[kept]

    def _adamw(self, p, g, s):
        self._adam(p, g, s, decoupled=True)

    def _rmsprop(self, p, g, s):
        h = self.h
        lr, alpha, eps = h.get("lr", 1e-2), h.get("alpha", 0.99), h.get("eps", 1e-8)
        wd, momentum, centered = h.get("weight_decay", 0.0), h.get("momentum", 0.0), h.get("centered", False)
        g = -g if h.get("maximize", False) else g
        if wd:
            g = g + wd * p
        sq = s.setdefault("sq", np.zeros_like(p))
        sq *= alpha
        sq += (1 - alpha) * g * g
        if centered:
            ga = s.setdefault("ga", np.zeros_like(p))
            ga += (g - ga) * (1 - alpha)
            avg = np.sqrt(sq - ga * ga) + eps
        else:
            avg = np.sqrt(sq) + eps
        if momentum > 0:
            buf = s.setdefault("buf", np.zeros_like(p))
            buf *= momentum
            buf += g / avg
            p -= lr * buf
        else:
            p -= lr * g / avg

    def _adagrad(self, p, g, s):
        h = self.h
        lr, lr_decay, eps = h.get("lr", 1e-2), h.get("lr_decay", 0.0), h.get("eps", 1e-10)
        wd = h.get("weight_decay", 0.0)
        g = -g if h.get("maximize", False) else g
        if wd:
            g = g + wd * p
        acc = s.setdefault("sum", np.full_like(p, h.get("initial_accumulator_value", 0.0)))
        clr = lr / (1 + (self.t - 1) * lr_decay)
        acc += g * g
        p -= clr * g / (np.sqrt(acc) + eps)

    def _lion(self, p, g, s):
        # Chen et al. 2023, Algorithm 2 with lion-pytorch's decoupled weight decay
        h = self.h
        lr, (b1, b2), wd = h.get("lr", 1e-4), h.get("betas", (0.9, 0.99)), h.get("weight_decay", 0.0)
        m = s.setdefault("m", np.zeros_like(p))
        c = np.sign(b1 * m + (1 - b1) * g)
        p *= 1 - lr * wd
        p -= lr * c
        m *= b2
        m += (1 - b2) * g

"""float64 numpy references of sopt.nn's modules: forward and backward (vector-Jacobian products), written
from the formulas in the docstrings, independent of the Slang kernels."""

from __future__ import annotations

import numpy as np

PRIMES = [1, 2654435761, 805459861, 3674653429]


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def activation(name: str, z: np.ndarray, **p: float) -> tuple[np.ndarray, np.ndarray]:
    """(act(z), act'(z)) with torch's conventions at kinks."""
    if name == "none":
        return z, np.ones_like(z)
    if name == "relu":
        return np.where(z > 0, z, 0.0), (z > 0).astype(np.float64)
    if name == "leaky_relu":
        s = p.get("slope", 0.01)
        return np.where(z > 0, z, s * z), np.where(z > 0, 1.0, s)
    if name == "sigmoid":
        s = sigmoid(z)
        return s, s * (1 - s)
    if name == "tanh":
        t = np.tanh(z)
        return t, 1 - t * t
    if name == "silu":
        s = sigmoid(z)
        return z * s, s * (1 + z * (1 - s))
    if name == "softplus":
        beta, threshold = p.get("beta", 1.0), p.get("threshold", 20.0)
        bz = beta * z
        linear = bz > threshold
        soft = np.logaddexp(0.0, np.where(linear, 0.0, bz)) / beta
        return np.where(linear, z, soft), np.where(linear, 1.0, sigmoid(bz))
    if name == "sine":
        w0 = p.get("w0", 30.0)
        return np.sin(w0 * z), w0 * np.cos(w0 * z)
    raise ValueError(name)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, dy: np.ndarray, act: str = "none", **p: float):
    """(y, dx, dW, db) of y = act(x W^T + b) for the cotangent dy."""
    z = x @ w.T + (b if b is not None else 0.0)
    y, d = activation(act, z, **p)
    dz = dy * d
    return y, dz @ w, dz.T @ x, dz.sum(0)


def frequency(x: np.ndarray, n_freqs: int) -> tuple[np.ndarray, np.ndarray]:
    """(y, dy/dx per output column as an (N, out, in) Jacobian) of tcnn's Frequency layout."""
    n, dims = x.shape
    y = np.zeros((n, dims * n_freqs * 2))
    jac = np.zeros((n, dims * n_freqs * 2, dims))
    for d in range(dims):
        for k in range(n_freqs):
            w = 2.0**k * np.pi
            col = (d * n_freqs + k) * 2
            y[:, col], y[:, col + 1] = np.sin(w * x[:, d]), np.cos(w * x[:, d])
            jac[:, col, d], jac[:, col + 1, d] = w * np.cos(w * x[:, d]), -w * np.sin(w * x[:, d])
    return y, jac


def hashgrid(x: np.ndarray, table: np.ndarray, levels, dy: np.ndarray):
    """(y, dx, dtable) of the hash grid encoding (levels: sopt.nn.hashgrid.GridLevel list, read from the
    module; positions computed in float32 like the kernel, the rest in float64)."""
    n, dims = x.shape
    feats = table.shape[1]
    y = np.zeros((n, len(levels) * feats))
    dx = np.zeros((n, dims))
    dtable = np.zeros_like(table, dtype=np.float64)
    for l, lv in enumerate(levels):
        pos = x.astype(np.float32) * np.float32(lv.scale) + np.float32(0.5)
        cell = np.floor(pos)
        t = (pos - cell).astype(np.float64)
        cell = cell.astype(np.int64)
        cols = slice(l * feats, (l + 1) * feats)
        for c in range(2**dims):
            upper = [(c >> d) & 1 for d in range(dims)]
            w = np.ones(n)
            index = np.zeros(n, np.uint64)
            stride = 1
            for d in range(dims):
                corner = (cell[:, d] + upper[d]).astype(np.uint64)
                w = w * (t[:, d] if upper[d] else 1 - t[:, d])
                if lv.hashed:
                    index ^= (corner * np.uint64(PRIMES[d])) & np.uint64(0xFFFFFFFF)
                else:
                    index = (index + corner * np.uint64(stride)) & np.uint64(0xFFFFFFFF)
                    stride *= lv.resolution
            row = lv.offset + (index % np.uint64(lv.size)).astype(np.int64)
            values = table[row].astype(np.float64)
            y[:, cols] += w[:, None] * values
            np.add.at(dtable, row, w[:, None] * dy[:, cols])
            dot = np.sum(dy[:, cols] * values, axis=1)
            for d in range(dims):
                partial = np.where(upper[d], 1.0, -1.0) * np.ones(n)
                for e in range(dims):
                    if e != d:
                        partial = partial * (t[:, e] if upper[e] else 1 - t[:, e])
                dx[:, d] += partial * dot * lv.scale
    return y, dx, dtable


def away_from_cell_faces(x: np.ndarray, levels, margin: float = 0.02) -> np.ndarray:
    """Rows of x whose position inside every level's cell is at least ``margin`` from a face (finite
    differences of the piecewise-linear encoding are exact there)."""
    keep = np.ones(len(x), bool)
    for lv in levels:
        frac = (x * lv.scale + 0.5) % 1.0
        keep &= np.all((frac > margin) & (frac < 1 - margin), axis=1)
    return x[keep]

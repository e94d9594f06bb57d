"""Checkpoints: parameters, optimiser state and scheduler state in one file, written atomically.

The file is a NumPy ``.npz`` archive: every array (parameter values, optimiser state) is an entry, and one
entry ``__meta__`` holds the rest as JSON (names, shapes, hyperparameters, step counts, scheduler state,
``extra``). It is written to a temporary file in the same folder, flushed to disk, then renamed over
``path``, so a crash mid-save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import tempfile
from typing import Any

import numpy as np

from sopt.parameter import Parameter, parameters_of

_META = "__meta__"


def _param_list(parameters: Any, optimizer: Any) -> list[Parameter]:
    if parameters is not None:
        return parameters_of(parameters)
    if optimizer is not None:
        return list(optimizer.arena.params)
    return []


def _split_arrays(obj: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """Replace every ndarray inside nested dicts/lists by a reference to an npz entry (JSON-safe result)."""
    if isinstance(obj, np.ndarray):
        key = f"{prefix}"
        arrays[key] = obj
        return {"__array__": key}
    if isinstance(obj, dict):
        return {"__dict__": [[_split_arrays(k, f"{prefix}/k{i}", arrays), _split_arrays(v, f"{prefix}/{i}", arrays)]
                             for i, (k, v) in enumerate(obj.items())]}
    if isinstance(obj, (list, tuple)):
        return {"__list__" if isinstance(obj, list) else "__tuple__":
                [_split_arrays(v, f"{prefix}/{i}", arrays) for i, v in enumerate(obj)]}
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return obj.item()
    return obj


def _join_arrays(obj: Any, arrays: Any) -> Any:
    if isinstance(obj, dict):
        if "__array__" in obj:
            return np.array(arrays[obj["__array__"]])
        if "__dict__" in obj:
            return {_join_arrays(k, arrays): _join_arrays(v, arrays) for k, v in obj["__dict__"]}
        if "__list__" in obj:
            return [_join_arrays(v, arrays) for v in obj["__list__"]]
        if "__tuple__" in obj:
            return tuple(_join_arrays(v, arrays) for v in obj["__tuple__"])
    return obj


def save(path: str | os.PathLike[str], parameters: Any = None, optimizer: Any = None, scheduler: Any = None,
         extra: dict[str, Any] | None = None) -> None:
    """Write ``parameters`` (a list, a name->Parameter dict or a module; default: the optimiser's), the
    optimiser's ``state_dict()``, the scheduler's ``state_dict()`` and ``extra`` (JSON-serialisable, may hold
    arrays) to ``path`` atomically."""
    params = _param_list(parameters, optimizer)
    arrays: dict[str, np.ndarray] = {}
    for i, p in enumerate(params):
        arrays[f"param/{i}"] = p.numpy()
    meta = {
        "format": "sopt-checkpoint-1",
        "parameters": [{"name": p.name, "shape": list(p.shape)} for p in params],
        "optimizer": _split_arrays(optimizer.state_dict(), "optim", arrays) if optimizer is not None else None,
        "scheduler": _split_arrays(scheduler.state_dict(), "sched", arrays) if scheduler is not None else None,
        "extra": _split_arrays(extra, "extra", arrays) if extra is not None else None,
    }
    buffer = io.BytesIO()
    np.savez(buffer, **{_META: np.frombuffer(json.dumps(meta).encode(), np.uint8)}, **arrays)
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path: str | os.PathLike[str], parameters: Any = None, optimizer: Any = None,
         scheduler: Any = None) -> dict[str, Any] | None:
    """Restore what :func:`save` wrote into the given objects; returns ``extra``.

    Parameters are matched in order and must have the saved names and shapes (ValueError otherwise).
    """
    target = pathlib.Path(path)
    if not target.is_file():
        raise ValueError(f"checkpoint {str(target)!r} does not exist")
    try:
        data = np.load(target, allow_pickle=False)
        meta = json.loads(bytes(data[_META]).decode())
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{str(target)!r} is not a sopt checkpoint: {exc}") from None
    params = _param_list(parameters, optimizer)
    saved = meta["parameters"]
    if params:
        if len(params) != len(saved):
            raise ValueError(f"checkpoint holds {len(saved)} parameters, {len(params)} were given to load into")
        for i, (p, s) in enumerate(zip(params, saved)):
            if tuple(s["shape"]) != p.shape:
                raise ValueError(f"parameter {i} ({p.name!r}) has shape {p.shape}, the checkpoint's "
                                 f"{s['name']!r} has {tuple(s['shape'])}")
        for i, p in enumerate(params):
            p.load(data[f"param/{i}"])
    if optimizer is not None:
        if meta["optimizer"] is None:
            raise ValueError(f"checkpoint {str(target)!r} has no optimiser state")
        optimizer.load_state_dict(_join_arrays(meta["optimizer"], data))
    if scheduler is not None:
        if meta["scheduler"] is None:
            raise ValueError(f"checkpoint {str(target)!r} has no scheduler state")
        scheduler.load_state_dict(_join_arrays(meta["scheduler"], data))
    return _join_arrays(meta["extra"], data)

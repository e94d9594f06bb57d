"""Checkpoints: parameters, optimiser state and scheduler state in one file, written atomically, loaded all or
nothing.

The file is a NumPy ``.npz`` archive: every array (parameter values, optimiser state) is an entry, and one
entry ``__meta__`` holds the rest as JSON (format tag, parameter names and shapes, hyperparameters, step
counts, scheduler state, ``extra``). It is written to a temporary file ``.<name>.<random>.tmp`` in the same
folder, flushed to disk, then renamed over ``path``, so a crash mid-save leaves the previous checkpoint intact;
the next save to ``path`` removes temporary files such crashes left behind.

Parameters are matched by name. Their keys are the names a module's ``named_parameters()`` or a
name->Parameter dict gives (qualified, e.g. ``"0.weight"``) when both the saving and the loading side passed
one, else each Parameter's ``name``. When the keys are unique, each saved parameter goes to the parameter of
the same key, in whatever order they are given; when they are not (two Linear layers' ``"weight"``s, say),
parameters are matched by position and must agree in name and shape position by position. Any other
difference raises, listing the missing and unexpected names.

:func:`load` reads the whole file and checks everything (archive, metadata, every array's dtype and shape,
parameter names and shapes, the optimiser's and scheduler's state through their own checks) before changing
anything: any problem raises :class:`CheckpointError` (a ValueError) naming the file, and leaves parameters,
optimiser and scheduler as they were.
"""

from __future__ import annotations

import glob
import io
import json
import os
import pathlib
import tempfile
from typing import Any

import numpy as np

from sopt.parameter import Parameter, parameters_of
from sopt.validation import as_float32_array

_META = "__meta__"
FORMAT = "sopt-checkpoint-1"
_TMP_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")   # tempfile.mkstemp's random names


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded (missing, unreadable, truncated, corrupt, of another format, or not
    matching the objects given to load into); nothing was changed."""


def _keyed_params(parameters: Any, optimizer: Any) -> tuple[list[tuple[str, Parameter]], bool]:
    """(key, Parameter) pairs and whether the keys are qualified names (from a module or a dict)."""
    if parameters is not None:
        if hasattr(parameters, "named_parameters") and callable(parameters.named_parameters):
            return list(parameters.named_parameters()), True
        if isinstance(parameters, dict):
            params = parameters_of(parameters)   # checks every value is a Parameter
            return [(str(k), p) for k, p in zip(parameters, params)], True
        return [(p.name, p) for p in parameters_of(parameters)], False
    if optimizer is not None:
        return [(p.name, p) for p in optimizer.arena.params], False
    return [], False


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
    arrays) to ``path`` atomically; temporary files of earlier interrupted saves to ``path`` are removed."""
    keyed, qualified = _keyed_params(parameters, optimizer)
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for i, (key, p) in enumerate(keyed):
        arrays[f"param/{i}"] = p.numpy()
        entries.append({"name": p.name, "shape": list(p.shape), **({"key": key} if qualified else {})})
    meta = {
        "format": FORMAT,
        "parameters": entries,
        "optimizer": _split_arrays(optimizer.state_dict(), "optim", arrays) if optimizer is not None else None,
        "scheduler": _split_arrays(scheduler.state_dict(), "sched", arrays) if scheduler is not None else None,
        "extra": _split_arrays(extra, "extra", arrays) if extra is not None else None,
    }
    if optimizer is not None:
        # which saved parameter each of the optimiser's is (its state is by position): load checks the order
        index = {id(p): i for i, (_, p) in enumerate(keyed)}
        positions = [index.get(id(p)) for p in optimizer.arena.params]
        if None not in positions:
            meta["optimizer_params"] = positions
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
    _remove_leftovers(target)


def _remove_leftovers(target: pathlib.Path) -> None:
    """Delete ``.<name>.<random>.tmp`` files that interrupted saves to ``target`` left (mkstemp's pattern; a save
    in progress elsewhere to the same path loses its temporary file and fails, as two writers would anyway)."""
    prefix = f".{target.name}."
    for leftover in target.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        middle = leftover.name[len(prefix):-len(".tmp")]
        # mkstemp's random part: 8 characters of [a-z0-9_]; never another file that happens to share the prefix
        if len(middle) == 8 and set(middle) <= _TMP_CHARS and leftover.is_file():
            try:
                leftover.unlink()
            except OSError:
                pass   # removed meanwhile, or not ours to remove: the save itself succeeded


def _read(target: pathlib.Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The metadata and every array of the checkpoint at ``target``, read and checked; CheckpointError else."""
    where = f"checkpoint {str(target)!r}"
    if not target.exists():
        raise CheckpointError(f"{where} does not exist")
    try:
        with open(target, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise CheckpointError(f"{where} cannot be read: {exc}") from exc
    if not raw:
        raise CheckpointError(f"{where} is empty (0 bytes); it is not a sopt checkpoint")
    if not raw.startswith(b"PK"):
        raise CheckpointError(f"{where} is not a sopt checkpoint: not a .npz (zip) archive")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            # reading every entry checks each one's CRC: a corrupt or truncated file fails here, not half-loaded
            arrays = {name: data[name] for name in data.files}
    except Exception as exc:   # zipfile.BadZipFile, zlib.error, EOFError, ValueError, ...: the file is damaged
        raise CheckpointError(f"{where} is not a sopt checkpoint or is damaged: {type(exc).__name__}: {exc}") from exc
    blob = arrays.pop(_META, None)
    if blob is None:
        raise CheckpointError(f"{where} is not a sopt checkpoint: it has no {_META!r} entry")
    try:
        meta = json.loads(bytes(np.asarray(blob, np.uint8)).decode("utf-8"))
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{where} has unreadable metadata: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{where} has format {found!r}; this version of sopt reads {FORMAT!r}")
    missing = [key for key in ("parameters", "optimizer", "scheduler", "extra") if key not in meta]
    if missing:
        raise CheckpointError(f"{where}'s metadata lacks {missing}")
    entries = meta["parameters"]
    if not isinstance(entries, list):
        raise CheckpointError(f"{where}'s metadata 'parameters' must be a list, got {type(entries).__name__}")
    for i, entry in enumerate(entries):
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if (not isinstance(entry, dict) or not isinstance(entry.get("name"), str)
                or not isinstance(entry.get("key", ""), str) or not isinstance(shape, list)
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
            raise CheckpointError(f"{where}'s metadata for parameter {i} is malformed: {entry!r}")
        array = arrays.get(f"param/{i}")
        if array is None:
            raise CheckpointError(f"{where} lacks the values of parameter {i} ({entry['name']!r})")
        if array.dtype.kind != "f" or tuple(array.shape) != tuple(shape):
            raise CheckpointError(f"{where}: parameter {i} ({entry['name']!r}) is stored as {array.dtype} "
                                  f"{tuple(array.shape)}, its metadata says float {tuple(shape)}")
    return meta, arrays


def _match(where: str, entries: list[dict[str, Any]], keyed: list[tuple[str, Parameter]],
           qualified: bool) -> list[int]:
    """For each given parameter, the index of the saved one it receives (see the module docstring)."""
    use_key = qualified and all("key" in e for e in entries)
    saved = [e["key"] if use_key else e["name"] for e in entries]
    given = [key if use_key else p.name for key, p in keyed]
    if len(set(saved)) == len(saved) and len(set(given)) == len(given):
        missing = [k for k in given if k not in set(saved)]
        unexpected = [k for k in saved if k not in set(given)]
        if missing or unexpected:
            raise CheckpointError(f"{where}: parameter names differ; not in the checkpoint: {missing}, in the "
                                  f"checkpoint but not given: {unexpected}")
        position = {k: i for i, k in enumerate(saved)}
        order = [position[k] for k in given]
    else:
        if len(saved) != len(given):
            raise CheckpointError(f"{where} holds {len(saved)} parameters, {len(given)} were given to load into")
        differ = [f"{i}: {g!r} here, {s!r} saved" for i, (g, s) in enumerate(zip(given, saved)) if g != s]
        if differ:
            raise CheckpointError(f"{where}: parameter names are not unique, so they are matched by position, and "
                                  f"differ at position {'; '.join(differ)}")
        order = list(range(len(given)))
    for (key, p), i in zip(keyed, order):
        if tuple(entries[i]["shape"]) != p.shape:
            raise CheckpointError(f"{where}: parameter {key!r} has shape {p.shape}, the checkpoint's "
                                  f"{saved[i]!r} has {tuple(entries[i]['shape'])}")
    return order


def load(path: str | os.PathLike[str], parameters: Any = None, optimizer: Any = None,
         scheduler: Any = None) -> dict[str, Any] | None:
    """Restore what :func:`save` wrote into the given objects, all or nothing; returns ``extra``.

    ``parameters`` (default: the optimiser's) are matched by name as the module docstring says. Everything
    is read and checked first; any problem raises :class:`CheckpointError` (a ValueError) naming the file and
    what is wrong, with every parameter, the optimiser and the scheduler left as they were.
    """
    target = pathlib.Path(path)
    where = f"checkpoint {str(target)!r}"
    meta, arrays = _read(target)
    keyed, qualified = _keyed_params(parameters, optimizer)
    if optimizer is not None and meta["optimizer"] is None:
        raise CheckpointError(f"{where} has no optimiser state")
    if scheduler is not None and meta["scheduler"] is None:
        raise CheckpointError(f"{where} has no scheduler state")
    try:   # the metadata's references to arrays, resolved
        extra = _join_arrays(meta["extra"], arrays)
        optimizer_state = _join_arrays(meta["optimizer"], arrays) if optimizer is not None else None
        scheduler_state = _join_arrays(meta["scheduler"], arrays) if scheduler is not None else None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{where} has malformed metadata: {type(exc).__name__}: {exc}") from exc

    values: list[tuple[Parameter, np.ndarray]] = []
    if keyed:
        order = _match(where, meta["parameters"], keyed, qualified)
        for (key, p), i in zip(keyed, order):
            try:
                values.append((p, as_float32_array(arrays[f"param/{i}"], f"parameter {key!r}", p.shape)))
            except ValueError as exc:
                raise CheckpointError(f"{where}: {exc}") from None
        if optimizer is not None and meta.get("optimizer_params") is not None:
            _check_optimizer_order(where, meta, keyed, order, optimizer)
    try:
        loaded_optimizer = optimizer._check_state_dict(optimizer_state) if optimizer is not None else None
    except ValueError as exc:
        raise CheckpointError(f"{where}: its optimiser state does not fit {type(optimizer).__name__}: {exc}") from None
    try:
        loaded_scheduler = scheduler._check_state_dict(scheduler_state) if scheduler is not None else None
    except ValueError as exc:
        raise CheckpointError(f"{where}: its scheduler state does not fit {type(scheduler).__name__}: {exc}") from None

    # everything is checked: apply
    for p, array in values:
        p.load(array)
    if optimizer is not None:
        optimizer._apply_state_dict(loaded_optimizer)
    if scheduler is not None:
        scheduler._apply_state_dict(loaded_scheduler)
    return extra


def _check_optimizer_order(where: str, meta: dict[str, Any], keyed: list[tuple[str, Parameter]], order: list[int],
                           optimizer: Any) -> None:
    """CheckpointError unless the optimiser holds its parameters in the order it was saved with (its state is
    by position), as far as the parameters given identify them."""
    positions = meta["optimizer_params"]
    names = [e["name"] for e in meta["parameters"]]
    params = optimizer.arena.params
    if (not isinstance(positions, list) or len(positions) != len(params)
            or not all(isinstance(i, int) and 0 <= i < len(names) for i in positions)):
        raise CheckpointError(f"{where}: its optimiser held {len(positions) if isinstance(positions, list) else '?'}"
                              f" parameters, {type(optimizer).__name__} holds {len(params)}")
    receives = {id(p): i for (_, p), i in zip(keyed, order)}   # live parameter -> saved index it receives
    wrong = [f"{k}: {p.name!r} here, {names[positions[k]]!r} saved" for k, p in enumerate(params)
             if id(p) in receives and receives[id(p)] != positions[k]]
    if wrong:
        raise CheckpointError(f"{where}: the optimiser holds its parameters in another order than when it was saved "
                              f"(its state is by position): position {'; '.join(wrong)}")

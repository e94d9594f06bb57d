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
difference raises, listing the missing and unexpected names. A module whose parameters are windows of one flat
Parameter (FullyFusedMLP, TensorCoreMLP: ``"0.weight"``, ``"0.bias"``, ... of ``params``) saves them per window,
as an MLP's; a checkpoint saved when such a module named its one flat Parameter instead (``"params"``, ``"1.params"``
in a Sequential) still loads: that entry, of the flat Parameter's shape, is read as its windows, and its optimiser
state likewise.

:func:`load` checks everything (archive, metadata, every array's dtype and shape, parameter names and shapes,
the optimiser's and scheduler's state through their own checks) before changing anything: any problem raises
:class:`CheckpointError` (a ValueError) naming the file, and leaves parameters, optimiser and scheduler as they
were. A checkpoint may come from anywhere, so load reads it bounded: only a regular file (a FIFO or a device is
refused before it is opened), a zip directory of at most the members expected, metadata nested at most
``_MAX_DEPTH`` deep, and each array only after its declared size, dtype and shape match what it is loaded into;
a member the metadata does not refer to, or one that would inflate beyond that, is refused, not inflated.
"""

from __future__ import annotations

import collections
import io
import json
import math
import os
import pathlib
import re
import reprlib
import struct
import zipfile
from typing import Any, BinaryIO, Callable

import numpy as np

from sopt.utils import atomic_write
from sopt.utils.nesting import text_depth
from sopt.autodiff.parameter import Parameter, parameters_of
from sopt.autodiff.parameter_window import ParameterWindow
from sopt.utils.regular_file import NotRegularFileError, open_regular
from sopt.utils.validation import as_float32_array

_META = "__meta__"
FORMAT = "sopt-checkpoint-1"

# Bounds on what a load reads, so that a hostile file costs little: every array's declared size is checked
# against what the objects loaded into expect before any of it is inflated.
_SMALL_BUDGET = 16 << 20          # bytes for the __meta__ JSON and extra's and the scheduler's arrays, together
_MAX_OTHER_MEMBERS = 4096         # members besides the parameters' and the optimiser state's
_MAX_DEPTH = 100                  # nesting of the metadata JSON (json.loads and _join_arrays recurse)
_MAX_RATIO = 1100                 # declared / compressed size of a member: deflate cannot pass ~1032:1
_MAX_DIRECTORY_ENTRY = 46 + 1024  # bytes of zip central directory per member: fixed part, name, extra fields
_MAX_NPY_HEADER = 10000           # numpy's own default bound on a .npy header
_MAX_FLOAT_BYTES = 8              # parameters and optimiser state are stored as float16/32/64
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
_MEMBER = re.compile(r"(?:param|optim|sched|extra)(?:/k?[0-9]{1,9})*")   # the array names save gives


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


def _join_arrays(obj: Any, array: Callable[[Any], Any]) -> Any:
    """The inverse of :func:`_split_arrays`: every ``{"__array__": name}`` replaced by ``array(name)``. The
    caller bounds the nesting (:data:`_MAX_DEPTH`) first."""
    if isinstance(obj, dict):
        if "__array__" in obj:
            return array(obj["__array__"])
        if "__dict__" in obj:
            return {_join_arrays(k, array): _join_arrays(v, array) for k, v in obj["__dict__"]}
        if "__list__" in obj:
            return [_join_arrays(v, array) for v in obj["__list__"]]
        if "__tuple__" in obj:
            return tuple(_join_arrays(v, array) for v in obj["__tuple__"])
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
    atomic_write.write_bytes(target, buffer.getvalue())   # removes the leftovers of interrupted saves too


def _open_regular(target: pathlib.Path, where: str) -> BinaryIO:
    """``target`` opened for binary reading if it is a regular file (links followed); CheckpointError at once
    else (:func:`sopt.utils.regular_file.open_regular`: a FIFO would block, a device never end)."""
    try:
        return open_regular(target)
    except NotRegularFileError as exc:
        raise CheckpointError(f"{where} is {exc.kind}; a checkpoint is a regular file") from None
    except FileNotFoundError:
        raise CheckpointError(f"{where} does not exist") from None
    except OSError as exc:
        raise CheckpointError(f"{where} cannot be read: {exc}") from exc


_END_RECORD = struct.Struct("<4s4H2LH")        # APPNOTE 4.3.16: end of central directory record
_ZIP64_LOCATOR = struct.Struct("<4sLQL")        # 4.3.15: zip64 end of central directory locator
_ZIP64_END_RECORD = struct.Struct("<4sQ2H2L4Q")  # 4.3.14: zip64 end of central directory record


def _central_directory_size(f: BinaryIO) -> tuple[int, int] | None:
    """(members, bytes) of the zip archive's central directory, from its end record (zip64's where the classic
    one says so), reading at most the file's last 64 KiB + 22 bytes and the 56-byte zip64 record; None where the
    file has no end record."""
    size = os.fstat(f.fileno()).st_size
    length = min(size, _END_RECORD.size + 0xFFFF)   # the record, then a comment of up to 65535 bytes
    f.seek(size - length)
    tail = f.read(length)
    at = len(tail)
    while True:   # the last signature whose record's comment ends the file (a comment may hold the signature)
        at = tail.rfind(b"PK\x05\x06", 0, at)
        if at < 0:
            return None
        if len(tail) - at >= _END_RECORD.size:
            _, _, _, _, members, directory, _, comment = _END_RECORD.unpack_from(tail, at)
            if at + _END_RECORD.size + comment == len(tail):
                break
    locator = at - _ZIP64_LOCATOR.size
    if (members == 0xFFFF or directory == 0xFFFFFFFF) and locator >= 0 and tail[locator:locator + 4] == b"PK\x06\x07":
        _, _, offset, _ = _ZIP64_LOCATOR.unpack_from(tail, locator)
        f.seek(offset)
        record = f.read(_ZIP64_END_RECORD.size)
        if len(record) == _ZIP64_END_RECORD.size and record[:4] == b"PK\x06\x06":
            fields = _ZIP64_END_RECORD.unpack(record)
            members, directory = fields[7], fields[8]
    f.seek(0)
    return members, directory


def _open_archive(f: BinaryIO, where: str, max_members: int) -> zipfile.ZipFile:
    """The zip archive in ``f``, its size bounded before zipfile parses its directory: at most ``max_members``
    members, each named once."""
    if os.fstat(f.fileno()).st_size == 0:
        raise CheckpointError(f"{where} is empty (0 bytes); it is not a sopt checkpoint")
    if f.read(2) != b"PK":
        raise CheckpointError(f"{where} is not a sopt checkpoint: not a .npz (zip) archive")
    try:
        # a bounded read of the file's tail: ZipFile would otherwise read and parse a central directory of
        # whatever size the end record declares
        end = _central_directory_size(f)
    except OSError as exc:
        raise CheckpointError(f"{where} cannot be read: {exc}") from exc
    if end is None:
        raise CheckpointError(f"{where} is not a sopt checkpoint or is damaged: it has no zip end-of-archive record")
    members, directory = end
    if members > max_members or directory > max_members * _MAX_DIRECTORY_ENTRY:
        raise CheckpointError(f"{where} declares {members} members in a {directory}-byte directory; at most "
                              f"{max_members} members are expected for what is loaded into")
    try:
        archive = zipfile.ZipFile(f)
    except Exception as exc:   # BadZipFile, ValueError, EOFError, struct.error, ...: the file is damaged
        raise CheckpointError(f"{where} is not a sopt checkpoint or is damaged: {type(exc).__name__}: {exc}") from exc
    names = [info.filename for info in archive.infolist()]
    repeated = sorted(name for name, count in collections.Counter(names).items() if count > 1)
    if len(names) > max_members or repeated:
        archive.close()
        what = f"member(s) {repeated} more than once" if repeated else f"{len(names)} members"
        raise CheckpointError(f"{where} holds {what}; a checkpoint holds at most {max_members} distinctly named ones")
    return archive


class _Members:
    """The members of an open checkpoint archive, each read only after its declared sizes, dtype and shape are
    checked against what it is loaded into: only a member's few header bytes are inflated before that."""

    def __init__(self, archive: zipfile.ZipFile, where: str) -> None:
        self.archive, self.where = archive, where
        self.infos = {info.filename: info for info in archive.infolist()}   # names are unique (_open_archive)
        self.small_left = _SMALL_BUDGET   # bytes left for the metadata and extra's and the scheduler's arrays

    def names(self) -> set[str]:
        """The names of the arrays held (member names without ``.npy``; other members under their own name)."""
        return {name[:-len(".npy")] if name.endswith(".npy") else name for name in self.infos}

    def read(self, name: str, shape: tuple[int, ...] | None, what: str) -> np.ndarray:
        """Array ``name``: with ``shape``, a float array of that shape (a parameter's or optimiser state); else
        any array of plain (non-object) data that fits in what is left of the small budget."""
        info = self.infos.get(f"{name}.npy")
        label = f"{self.where}: member {name!r} ({what})"
        if info is None:
            raise CheckpointError(f"{label} is missing")
        if info.flag_bits & 0x1:
            raise CheckpointError(f"{label} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise CheckpointError(f"{label} uses zip compression method {info.compress_type}; checkpoints are "
                                  f"stored or deflated")
        if info.file_size > _MAX_RATIO * max(info.compress_size, 1):
            raise CheckpointError(f"{label} declares {info.file_size} bytes compressed into {info.compress_size}, "
                                  f"a ratio beyond deflate's (at most {_MAX_RATIO}:1)")
        limit = _MAX_NPY_HEADER + (self.small_left if shape is None else math.prod(shape) * _MAX_FLOAT_BYTES)
        if info.file_size > limit:
            raise CheckpointError(f"{label} declares {info.file_size} bytes, at most {limit} expected")
        try:
            with self.archive.open(info) as stream:
                version = np.lib.format.read_magic(stream)
                if version not in _NPY_HEADER_READERS:
                    raise CheckpointError(f"{label} is a .npy of format version {version}; sopt reads 1.0 and 2.0")
                found, fortran, dtype = _NPY_HEADER_READERS[version](stream, max_header_size=_MAX_NPY_HEADER)
                nbytes = self._check_header(label, found, dtype, shape)
                if info.file_size != stream.tell() + nbytes:
                    raise CheckpointError(f"{label} declares {info.file_size} bytes, its header says "
                                          f"{stream.tell() + nbytes} ({dtype} {tuple(found)})")
                data = stream.read(nbytes)
                if len(data) != nbytes or stream.read(1):   # reading to the end checks the CRC
                    raise CheckpointError(f"{label} holds {len(data)} bytes of data, its header says {nbytes}")
                array = np.frombuffer(data, dtype, math.prod(found)).reshape(found, order="F" if fortran else "C")
                return array.astype(dtype.newbyteorder("="))   # a writable copy, in this machine's byte order
        except CheckpointError:
            raise
        except Exception as exc:   # BadZipFile (CRC), zlib.error, EOFError, ValueError (bad header), ...
            raise CheckpointError(f"{label} is damaged: {type(exc).__name__}: {exc}") from exc

    def _check_header(self, label: str, found: tuple[int, ...], dtype: np.dtype, shape: tuple[int, ...] | None) -> int:
        """The data size a .npy header declares, if the header is what is expected (see :meth:`read`)."""
        if dtype.hasobject or dtype.itemsize == 0:
            raise CheckpointError(f"{label} holds {dtype} items; checkpoints hold plain numbers (nothing pickled)")
        if any(n < 0 for n in found):
            raise CheckpointError(f"{label} declares a negative shape {tuple(found)}")
        nbytes = math.prod(found) * dtype.itemsize
        if shape is not None:
            if dtype.kind != "f" or dtype.itemsize > _MAX_FLOAT_BYTES or tuple(found) != tuple(shape):
                raise CheckpointError(f"{label} holds {dtype} {tuple(found)}, expected float {tuple(shape)}")
        elif nbytes > self.small_left:
            raise CheckpointError(f"{label} holds {dtype} {tuple(found)} ({nbytes} bytes), beyond the "
                                  f"{self.small_left} bytes left of the {_SMALL_BUDGET} for metadata, extra and "
                                  f"scheduler arrays")
        else:
            self.small_left -= nbytes
        return nbytes

    def meta(self) -> dict[str, Any]:
        """The ``__meta__`` JSON, its nesting bounded before it is parsed, and its top level checked."""
        where = self.where
        if _META not in self.names():
            raise CheckpointError(f"{where} is not a sopt checkpoint: it has no {_META!r} entry")
        blob = self.read(_META, None, "metadata")
        if blob.dtype != np.uint8 or blob.ndim != 1:
            raise CheckpointError(f"{where}: member {_META!r} holds {blob.dtype} {blob.shape}, expected uint8 bytes")
        try:
            text = blob.tobytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"{where} has unreadable metadata: {exc}") from exc
        depth = text_depth(text)   # json.loads and the resolver recurse: bounded before either runs
        if depth > _MAX_DEPTH:
            raise CheckpointError(f"{where} has metadata nested {depth} deep; at most {_MAX_DEPTH} is allowed")
        try:
            meta = json.loads(text)
        except ValueError as exc:
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
                raise CheckpointError(f"{where}'s metadata for parameter {i} is malformed: {reprlib.repr(entry)}")
        return meta


class _Ref:
    """A reference to an array member, standing in for the array while the metadata is checked (unhashable,
    as an array is)."""
    __slots__ = ("name",)
    __hash__ = None   # type: ignore[assignment]

    def __init__(self, name: str) -> None:
        self.name = name


class _Cut:
    """A window's elements (``index``, flat) of an array member of ``shape``: the flat Parameter of windowed
    parameters saved whole (see the module docstring), standing in for the window's array (unhashable)."""
    __slots__ = ("name", "shape", "index")
    __hash__ = None   # type: ignore[assignment]

    def __init__(self, name: str, shape: tuple[int, ...], index: np.ndarray) -> None:
        self.name, self.shape, self.index = name, shape, index


def _resolve(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Placeholders (:class:`_Ref`, :class:`_Cut`) inside nested dicts/lists/tuples replaced by their arrays."""
    if isinstance(obj, _Ref):
        return arrays[obj.name]
    if isinstance(obj, _Cut):
        return arrays[obj.name].reshape(-1)[obj.index]
    if isinstance(obj, dict):
        return {k: _resolve(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_resolve(v, arrays) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_resolve(v, arrays) for v in obj)
    return obj


def _window_families(keyed: list[tuple[str, Parameter]],
                     use_key: bool) -> list[tuple[str, Parameter, list[tuple[str, ParameterWindow]]]]:
    """(the name its flat Parameter had when saved whole, that Parameter, [(key, window)] in the module's order)
    for every flat Parameter whose windows are all given: with qualified keys the windows' common prefix
    (``"1."`` of ``"1.0.weight"``) before the flat Parameter's name, else its name."""
    by_base: dict[int, list[tuple[str, ParameterWindow]]] = {}
    for key, p in keyed:
        if isinstance(p, ParameterWindow):
            by_base.setdefault(id(p.base), []).append((key, p))
    families = []
    for items in by_base.values():
        base, siblings = items[0][1].base, items[0][1].siblings
        given = {id(w): key for key, w in items}
        if set(given) != {id(w) for w in siblings}:
            continue
        if use_key:
            legacy = {key[:len(key) - len(w.key)] + base.name if key.endswith(w.key) else None for key, w in items}
            if len(legacy) != 1 or None in legacy:
                continue
            (name,) = legacy
        else:
            name = base.name
        families.append((name, base, [(given[id(w)], w) for w in siblings]))
    return families


def _expand_flat_entries(entries: list[dict[str, Any]], keyed: list[tuple[str, Parameter]], qualified: bool
                         ) -> tuple[list[dict[str, Any]], list[tuple[int, ParameterWindow | None]]] | None:
    """The saved parameter entries with every entry that is a given family of windows' flat Parameter saved whole
    (its name, its shape; with qualified keys, none of the windows' keys saved) replaced by one entry per window,
    and for each entry (the saved index it reads, the window or None). None when no entry is such."""
    use_key = qualified and all("key" in e for e in entries)
    saved = [e["key"] if use_key else e["name"] for e in entries]
    taken: dict[int, list[tuple[str, ParameterWindow]]] = {}
    for name, base, windows in _window_families(keyed, use_key):
        if use_key and any(key in saved for key, _ in windows):
            continue
        for i, e in enumerate(entries):
            if i not in taken and saved[i] == name and tuple(e["shape"]) == base.shape:
                taken[i] = windows
                break
    if not taken:
        return None
    out: list[dict[str, Any]] = []
    sources: list[tuple[int, ParameterWindow | None]] = []
    for i, e in enumerate(entries):
        for key, w in taken.get(i, ()):
            out.append({"name": w.name, "shape": list(w.shape), **({"key": key} if use_key else {})})
            sources.append((i, w))
        if i not in taken:
            out.append(e)
            sources.append((i, None))
    return out, sources


def _expand_optimizer(state: Any, positions: Any, sources: list[tuple[int, ParameterWindow | None]],
                      saved: list[dict[str, Any]]) -> tuple[Any, list[int]] | None:
    """An optimiser's resolved state (placeholders) saved over flat Parameters that load as windows
    (:func:`_expand_flat_entries`): each flat Parameter's index in ``state`` and in its group's ``params``
    becomes its windows' consecutive indices, its state arrays their windows' elements (:class:`_Cut`); and its
    ``optimizer_params`` (saved parameter index per optimiser parameter) in the expanded entries' indices. None
    when the state is not laid out so (the state's own checks then report it)."""
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict) or not isinstance(positions, list) \
            or not all(isinstance(i, int) and 0 <= i < len(saved) for i in positions):
        return None
    expanded = {i: [j for j, (src, _) in enumerate(sources) if src == i] for i in set(positions)}
    new_index: list[list[int]] = []   # old optimiser index -> new ones
    cursor = 0
    for i in positions:
        n = len(expanded[i])
        new_index.append(list(range(cursor, cursor + n)))
        cursor += n
    new_state: dict[int, Any] = {}
    for k, entry in state["state"].items():
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(positions) or not isinstance(entry, dict):
            return None
        for j, new in zip(expanded[positions[k]], new_index[k]):
            w = sources[j][1]
            new_state[new] = {name: _Cut(v.name, tuple(saved[positions[k]]["shape"]), w.index)
                              if isinstance(v, _Ref) and w is not None else v for name, v in entry.items()}
    groups = []
    for g in state.get("param_groups", []):
        if not isinstance(g, dict) or not isinstance(g.get("params"), list) \
                or not all(isinstance(k, int) and 0 <= k < len(positions) for k in g["params"]):
            return None
        groups.append({**g, "params": [new for k in g["params"] for new in new_index[k]]})
    return ({**state, "state": new_state, "param_groups": groups},
            [j for i in positions for j in expanded[i]])


def _references(section: str, refs: dict[str, str]) -> Callable[[Any], _Ref]:
    """A resolver for :func:`_join_arrays` that records each array reference of ``section`` in ``refs``
    (member name -> section); a malformed or repeated reference raises ValueError."""
    def resolve(name: Any) -> _Ref:
        if not isinstance(name, str) or not _MEMBER.fullmatch(name) or name in refs:
            raise ValueError(f"array reference {reprlib.repr(name)} is malformed or repeated")
        refs[name] = section
        return _Ref(name)
    return resolve


def _optimizer_shapes(state: Any, optimizer: Any) -> dict[str, tuple[int, ...]]:
    """For each array reference in the optimiser's resolved state_dict, the shape it must have: state arrays sit
    at ``state[parameter index][state name]`` (Optimizer.state_dict's layout), each of its parameter's shape.
    References anywhere else are left out (and refused by the caller)."""
    params = optimizer.arena.params
    shapes: dict[str, tuple[int, ...]] = {}
    by_index = state.get("state") if isinstance(state, dict) else None
    for key, entry in by_index.items() if isinstance(by_index, dict) else ():
        i = key if isinstance(key, int) and not isinstance(key, bool) else -1
        for name, value in entry.items() if isinstance(entry, dict) else ():
            if isinstance(value, _Cut) and name in optimizer.state_names and 0 <= i < len(params):
                shapes[value.name] = value.shape   # the flat Parameter's state, read whole and cut
            elif isinstance(value, _Ref) and name in optimizer.state_names and 0 <= i < len(params):
                shapes[value.name] = tuple(params[i].shape)
    return shapes

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
         scheduler: Any = None, check_extra: Callable[[Any], None] | None = None) -> dict[str, Any] | None:
    """Restore what :func:`save` wrote into the given objects, all or nothing; returns ``extra``.

    ``parameters`` (default: the optimiser's) are matched by name as the module docstring says. Everything
    is read and checked first; any problem raises :class:`CheckpointError` (a ValueError) naming the file and
    what is wrong, with every parameter, the optimiser and the scheduler left as they were. ``check_extra``,
    if given, is called with ``extra`` before anything is applied; a ValueError it raises is such a problem.

    Only a regular file is read, and no more of it than the objects loaded into need: every member's declared
    size, dtype and shape are checked before its data is inflated (a parameter's against the parameter, the
    optimiser's state against its parameters, the metadata and extra's and the scheduler's arrays against a
    budget of 16 MiB together); members the metadata does not refer to are refused, not read.
    """
    target = pathlib.Path(path)
    where = f"checkpoint {str(target)!r}"
    keyed, qualified = _keyed_params(parameters, optimizer)
    state_names = tuple(optimizer.state_names) if optimizer is not None else ()
    max_members = 1 + len(keyed) * (1 + len(state_names)) + _MAX_OTHER_MEMBERS
    with _open_regular(target, where) as f, _open_archive(f, where, max_members) as archive:
        members = _Members(archive, where)
        meta = members.meta()
        if optimizer is not None and meta["optimizer"] is None:
            raise CheckpointError(f"{where} has no optimiser state")
        if scheduler is not None and meta["scheduler"] is None:
            raise CheckpointError(f"{where} has no scheduler state")
        refs = {f"param/{i}": "parameter" for i in range(len(meta["parameters"]))}   # member name -> section
        try:   # the metadata's references to arrays, as placeholders: what is needed is known before any is read
            placeholders = {section: _join_arrays(meta[section], _references(section, refs))
                            for section in ("optimizer", "scheduler", "extra")}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{where} has malformed metadata: {type(exc).__name__}: {exc}") from exc
        missing = sorted(set(refs) - members.names())
        foreign = sorted(members.names() - set(refs) - {_META})
        if missing:
            raise CheckpointError(f"{where} lacks the member(s) {reprlib.repr(missing)} its metadata refers to")
        if foreign:
            raise CheckpointError(f"{where} holds member(s) {reprlib.repr(foreign)} its metadata does not refer to")
        saved_entries = meta["parameters"]
        expanded = _expand_flat_entries(saved_entries, keyed, qualified) if keyed else None
        sources = [(i, None) for i in range(len(saved_entries))]
        if expanded is not None:   # flat Parameters saved whole, loaded as their windows
            entries, sources = expanded
            meta = {**meta, "parameters": entries}
            if optimizer is not None and meta["optimizer"] is not None:
                translated = _expand_optimizer(placeholders["optimizer"], meta.get("optimizer_params"), sources,
                                               saved_entries)
                if translated is not None:
                    placeholders["optimizer"], meta["optimizer_params"] = translated
        order = _match(where, meta["parameters"], keyed, qualified) if keyed else []
        shapes = {f"param/{sources[i][0]}": tuple(p.shape) if sources[i][1] is None
                  else tuple(saved_entries[sources[i][0]]["shape"]) for (_, p), i in zip(keyed, order)}
        if optimizer is not None:
            shapes.update(_optimizer_shapes(placeholders["optimizer"], optimizer))
            stray = [name for name, section in refs.items() if section == "optimizer" and name not in shapes]
            if stray:
                raise CheckpointError(f"{where}: its optimiser state holds array(s) {reprlib.repr(stray)} where "
                                      f"{type(optimizer).__name__} keeps none (it keeps {list(state_names)} per "
                                      f"parameter)")
        # read: the parameters and optimiser state given (of the shapes expected), extra and the scheduler's arrays
        # (within the small budget); the rest (e.g. parameters when none are given) is never inflated
        needed = {"extra", *(("scheduler",) if scheduler is not None else ())}
        arrays = {name: members.read(name, shape, section)
                  for name, section in refs.items()
                  if (shape := shapes.get(name)) is not None or section in needed}
    try:   # the metadata's references to arrays, resolved
        extra = _join_arrays(meta["extra"], arrays.__getitem__)
        optimizer_state = _resolve(placeholders["optimizer"], arrays) if optimizer is not None else None
        scheduler_state = _join_arrays(meta["scheduler"], arrays.__getitem__) if scheduler is not None else None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{where} has malformed metadata: {type(exc).__name__}: {exc}") from exc

    values: list[tuple[Parameter, np.ndarray]] = []
    for (key, p), i in zip(keyed, order):
        src, window = sources[i]
        array = arrays[f"param/{src}"] if window is None else arrays[f"param/{src}"].reshape(-1)[window.index]
        try:
            values.append((p, as_float32_array(array, f"parameter {key!r}", p.shape)))
        except ValueError as exc:
            raise CheckpointError(f"{where}: {exc}") from None
    if keyed and optimizer is not None and meta.get("optimizer_params") is not None:
        _check_optimizer_order(where, meta, keyed, order, optimizer)
    try:
        loaded_optimizer = optimizer._check_state_dict(optimizer_state) if optimizer is not None else None
    except ValueError as exc:
        raise CheckpointError(f"{where}: its optimiser state does not fit {type(optimizer).__name__}: {exc}") from None
    try:
        loaded_scheduler = scheduler._check_state_dict(scheduler_state) if scheduler is not None else None
    except ValueError as exc:
        raise CheckpointError(f"{where}: its scheduler state does not fit {type(scheduler).__name__}: {exc}") from None
    if check_extra is not None:
        try:
            check_extra(extra)
        except ValueError as exc:
            raise CheckpointError(f"{where}: {exc}") from None

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

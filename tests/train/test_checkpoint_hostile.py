"""Hostile checkpoints: sopt.load refuses each with one CheckpointError naming the file and the problem, at once,
without inflating what it does not need and without changing the parameters, optimiser or scheduler."""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import signal
import struct
import tracemalloc
import warnings
import zipfile
from typing import Any, Callable

import numpy as np
import pytest

import sopt
from sopt.train import Trainer
from tests.train.test_checkpoint import _assert_unchanged, _entry, _snapshot, _trained

BOMB_BYTES = 128 << 20    # a member inflating to this much compresses to ~130 KB
PEAK_LIMIT = 32 << 20     # what a refused load may allocate (the old load inflated every member whole)


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """Trained parameters, Adam and StepLR, and a good checkpoint of them (with an array in ``extra``)."""
    params, opt, sched = _trained()
    good = tmp_path_factory.mktemp("good") / "good.npz"
    sopt.save(good, optimizer=opt, scheduler=sched, extra={"step": 3, "table": np.arange(4.0)})
    for p in params:   # move on from the saved state, so a partial load would show
        p.set_grad(np.full(p.shape, 0.3))
    opt.step()
    sched.step()
    return params, opt, sched, good


# -- writing hostile files -----------------------------------------------------------------------------------------
def _npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def _npy_header(descr: str, shape: tuple[int, ...], fortran: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return buffer.getvalue()


class _Bomb:
    """A .npy member of BOMB_BYTES float32 zeros, written deflated."""


def _members(good: pathlib.Path) -> dict[str, Any]:
    with zipfile.ZipFile(good) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def _meta(members: dict[str, Any]) -> dict[str, Any]:
    return json.loads(np.load(io.BytesIO(members["__meta__.npy"])).tobytes())


def _with_meta(members: dict[str, Any], meta: Any, raw: bytes | None = None) -> dict[str, Any]:
    text = raw if raw is not None else json.dumps(meta).encode()
    return {**members, "__meta__.npy": _npy(np.frombuffer(text, np.uint8))}


def _zip(path: pathlib.Path, members: dict[str, Any] | list[tuple[str, Any]],
         compress_type: int = zipfile.ZIP_STORED) -> pathlib.Path:
    """Write ``members`` (name -> .npy bytes, or a _Bomb) as a zip archive at ``path``."""
    items = members.items() if isinstance(members, dict) else members
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # zipfile warns of a repeated name
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in items:
                if isinstance(data, _Bomb):
                    info = zipfile.ZipInfo(name)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    with zf.open(info, "w", force_zip64=True) as out:
                        out.write(_npy_header("<f4", (BOMB_BYTES // 4,)))
                        chunk = bytes(1 << 20)
                        for _ in range(BOMB_BYTES >> 20):
                            out.write(chunk)
                else:
                    zf.writestr(zipfile.ZipInfo(name), data, compress_type=compress_type)
    return path


def _patched(path: pathlib.Path, good: pathlib.Path, member: str, offset: int, fmt: str, value: int) -> pathlib.Path:
    """A copy of ``good`` with one field of ``member``'s central-directory entry set to ``value``."""
    raw = bytearray(good.read_bytes())
    start = bytes(raw).rindex(member.encode()) - 46   # the directory comes last; its entries' names start at 46
    assert raw[start:start + 4] == b"PK\x01\x02"
    struct.pack_into(fmt, raw, start + offset, value)
    path.write_bytes(bytes(raw))
    return path


def _optim_member(members: dict[str, Any]) -> str:
    return next(name for name in members if name.startswith("optim/"))


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _with_raw(members: dict[str, Any], section: str, text: str) -> dict[str, Any]:
    """``members`` with the metadata's ``section`` replaced by the JSON ``text`` (json.dumps would recurse)."""
    raw = json.dumps({**_meta(members), section: "@section@"}).replace('"@section@"', text)
    return _with_meta(members, None, raw.encode())


def _deep_optimizer(members: dict[str, Any]) -> dict[str, Any]:
    """``members`` with the optimiser's state wrapped in 5000 one-element lists."""
    inner = json.dumps(_meta(members)["optimizer"])
    return _with_raw(members, "optimizer", '{"__list__": [' * 5000 + inner + "]}" * 5000)


def _misplaced_array(meta: dict[str, Any]) -> dict[str, Any]:
    _entry(meta["optimizer"], "max_grad_norm")[1] = {"__array__": "optim/9"}
    return meta


def _truncated_directory(path: pathlib.Path, good: pathlib.Path) -> pathlib.Path:
    raw = good.read_bytes()
    start = raw.index(b"PK\x01\x02")
    path.write_bytes(raw[:start + 10] + raw[start + 30:])
    return path


# name -> (make(path, good) -> the file to load, what the message must say)
CASES: dict[str, tuple[Callable[[pathlib.Path, pathlib.Path], pathlib.Path], str]] = {
    "fifo": (lambda p, g: (os.mkfifo(p), p)[1], r"is a FIFO \(named pipe\); a checkpoint is a regular file"),
    "dev_zero": (lambda p, g: pathlib.Path("/dev/zero"), r"is a character device; a checkpoint is a regular file"),
    "link_to_urandom": (lambda p, g: (p.symlink_to("/dev/urandom"), p)[1],
                        r"is a character device \(a symbolic link to '/dev/urandom'\)"),
    "directory": (lambda p, g: (p.mkdir(), p)[1], r"is a folder; a checkpoint is a regular file"),
    "bomb_as_parameter": (lambda p, g: _zip(p, {**_members(g), "param/0.npy": _Bomb()}),
                          r"member 'param/0' \(parameter\) declares 134217856 bytes, at most 10048 expected"),
    "bomb_as_foreign_member": (lambda p, g: _zip(p, {**_members(g), "evil.npy": _Bomb()}),
                               r"holds member\(s\) \['evil'\] its metadata does not refer to"),
    "bomb_as_optimizer_state": (lambda p, g: _zip(p, {**(m := _members(g)), _optim_member(m): _Bomb()}),
                                r"\(optimizer\) declares 134217856 bytes, at most 100(48|32) expected"),
    "bomb_in_extra": (lambda p, g: _zip(p, {**_members(g), "extra/1.npy": _Bomb()}),
                      r"member 'extra/1' \(extra\) declares 134217856 bytes, at most 167\d{5} expected"),
    "bomb_where_optimizer_keeps_no_array": (
        lambda p, g: _zip(p, {**_with_meta(m := _members(g), _misplaced_array(_meta(m))), "optim/9.npy": _Bomb()}),
        r"its optimiser state holds array\(s\) \['optim/9'\] where Adam keeps none"),
    "ratio_beyond_deflate": (lambda p, g: _patched(p, g, "param/1.npy", 24, "<I", 2**31),
                             r"member 'param/1' \(parameter\) declares 2147483648 bytes compressed into \d+, a ratio"),
    "declared_size_disagrees_with_header": (lambda p, g: _patched(p, g, "param/1.npy", 24, "<I", 200),
                                            r"member 'param/1' \(parameter\) declares 200 bytes, its header says 144"),
    "encrypted_member": (lambda p, g: _patched(p, g, "param/1.npy", 8, "<H", 1), r"member 'param/1' .* is encrypted"),
    "bzip2_member": (lambda p, g: _zip(p, _members(g), zipfile.ZIP_BZIP2), r"uses zip compression method 12"),
    "json_nested_100000_deep": (lambda p, g: _zip(p, _with_raw(_members(g), "extra", _nested(100000))),
                                r"has metadata nested 100001 deep; at most 100 is allowed"),
    "tagged_list_nested_5000_deep": (lambda p, g: _zip(p, _deep_optimizer(_members(g))),
                                     r"has metadata nested 100\d\d deep; at most 100 is allowed"),
    "metadata_beyond_budget": (
        lambda p, g: _zip(p, _with_meta(m := _members(g), None, json.dumps(_meta(m)).encode() + b" " * (17 << 20))),
        r"member '__meta__' \(metadata\) declares \d+ bytes, at most 16787216 expected"),
    "repeated_member": (lambda p, g: _zip(p, [*_members(g).items(), ("param/0.npy", _members(g)["param/0.npy"])]),
                        r"holds member\(s\) \['param/0.npy'\] more than once"),
    "dotdot_member": (lambda p, g: _zip(p, {**_members(g), "../evil.npy": _npy(np.zeros(3))}),
                      r"holds member\(s\) \['../evil'\] its metadata does not refer to"),
    "dotdot_reference": (
        lambda p, g: _zip(p, {**_with_meta(m := _members(g), {**_meta(m), "extra": {"__array__": "../../x"}}),
                              "../../x.npy": _npy(np.zeros(3))}),
        r"malformed metadata: ValueError: array reference '../../x' is malformed or repeated"),
    "reference_repeated": (
        lambda p, g: _zip(p, _with_meta(m := _members(g), {**_meta(m), "extra": {"__list__": [
            {"__array__": "param/0"}, {"__array__": "extra/1"}]}})),
        r"array reference 'param/0' is malformed or repeated"),
    "pickled_object_array": (lambda p, g: _zip(p, {**(m := _members(g)), "extra/1.npy": _npy(
        np.array([{"a": 1}], dtype=object), allow_pickle=True)}), r"holds object items; .*nothing pickled"),
    "header_shape_differs": (lambda p, g: _zip(p, {**_members(g), "param/0.npy": _npy_header("<f4", (2**25,))}),
                             r"member 'param/0' \(parameter\) holds float32 \(33554432,\), expected float \(2, 3\)"),
    "negative_shape": (lambda p, g: _zip(p, {**_members(g), "param/1.npy": _npy_header("<f4", (-4,)) + bytes(16)}),
                       r"member 'param/1' \(parameter\) declares a negative shape \(-4,\)"),
    "huge_shape_in_extra": (lambda p, g: _zip(p, {**_members(g), "extra/1.npy": _npy_header("<f8", (2**40,))}),
                            r"holds float64 \(1099511627776,\) \(8796093022208 bytes\), beyond the"),
    "6000_members": (lambda p, g: _zip(p, {**_members(g), **{f"x{i}.npy": _npy(np.zeros(0)) for i in range(6000)}}),
                     r"declares 60\d\d members in a \d+-byte directory; at most 4\d\d\d members are expected"),
    "truncated_directory": (_truncated_directory, r"is not a sopt checkpoint or is damaged: BadZipFile"),
    "random_bytes_after_PK": (lambda p, g: (p.write_bytes(b"PK" + np.random.default_rng(0).bytes(4096)), p)[1],
                              r"is not a sopt checkpoint or is damaged: it has no zip end-of-archive record"),
}


def _alarm(signum, frame):
    raise TimeoutError("sopt.load blocked")


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_checkpoint_is_one_error_at_once_within_bounds_changing_nothing(case, state, tmp_path):
    params, opt, sched, good = state
    make, message = CASES[case]
    path = make(tmp_path / f"{case}.npz", good)
    before = _snapshot(params, opt, sched)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)   # a FIFO or a device must not block or be read forever: fail instead of hanging
    tracemalloc.start()
    try:
        with pytest.raises(sopt.CheckpointError) as info:
            sopt.load(path, optimizer=opt, scheduler=sched)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    text = str(info.value)
    assert "\n" not in text and str(path) in text, text
    assert re.search(message, text), text
    assert peak < PEAK_LIMIT, f"{case}: load allocated {peak} bytes"
    _assert_unchanged(before, params, opt, sched)


def test_the_good_checkpoint_still_loads(state):
    params, opt, sched, good = state
    extra = sopt.load(good, optimizer=opt, scheduler=sched)
    assert extra["step"] == 3 and np.array_equal(extra["table"], np.arange(4.0))
    assert sched.state_dict()["last_epoch"] == 3 and opt.state_dict()["step"] == 3


# -- Trainer.restore: extra must hold a valid step ---------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    ({"metrics": {}}, r"it was not written by sopt.train.Checkpoint \(no 'step' in extra\)"),
    ({"step": -1}, r"its extra 'step' is -1; the count of completed steps must be an int >= 0"),
    ({"step": "3"}, r"its extra 'step' is '3'; the count of completed steps must be an int >= 0"),
    ({"step": True}, r"its extra 'step' is True"),
    ({"step": 1.5}, r"its extra 'step' is 1.5"),
])
def test_restore_refuses_a_bad_step_changing_nothing(extra, message, state, tmp_path):
    params, opt, sched, _ = state
    path = tmp_path / "ckpt.npz"
    sopt.save(path, optimizer=opt, scheduler=sched, extra=extra)
    for p in params:   # move on, so a partial restore would show
        p.set_grad(np.full(p.shape, 0.1))
    opt.step()
    sched.step()
    before = _snapshot(params, opt, sched)
    trainer = Trainer(objective=lambda tape, step: None, optimizer=opt, scheduler=sched, progress=False)
    with pytest.raises(sopt.CheckpointError, match=re.escape(str(path)) + "': " + message):
        trainer.restore(str(path))
    _assert_unchanged(before, params, opt, sched)
    assert trainer.step == 0


def test_restore_refuses_a_step_beyond_the_run(state, tmp_path):
    params, opt, sched, _ = state
    path = tmp_path / "ckpt.npz"
    sopt.save(path, optimizer=opt, scheduler=sched, extra={"step": 50})
    trainer = Trainer(objective=lambda tape, step: None, optimizer=opt, scheduler=sched, progress=False)
    with pytest.raises(sopt.CheckpointError, match=r"its extra 'step' is 50; .* must be an int in \[0, 40\]"):
        trainer.restore(str(path), steps=40)
    assert trainer.restore(str(path), steps=50)["step"] == 50 and trainer.step == 50

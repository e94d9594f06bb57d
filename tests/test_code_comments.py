"""Code comments and docstrings in ``sopt/`` and ``problems/`` say why the code is as it is, not what it measured.

Measurements (timings, throughputs, the GPU they came from) belong in ``benchmarks/RESULTS.md``, where a rerun can
update them; in a comment they go stale unseen. This test reads every ``#`` comment (consecutive comment lines as
one text) and every module, class and function docstring of the Python files under ``sopt/`` and ``problems/``
(Slang files are not read) and fails on a measurement, by these rules:

1. a number followed by a throughput unit (``GB/s``, ``GiB/s``, ``MB/s``, ``TB/s``, ``TFLOP``, ``GFLOPS``, ...);
2. a number followed by a sub-millisecond time (``ns``, ``us``, ``µs``, ``microseconds``): sopt documents no
   setting or physical quantity that small, so such a number is a cost someone timed;
3. a number followed by ``ms``, ``s``, ``seconds`` or ``min`` when it is approximate (``~3 s``) or when a word of
   cost or of a test machine is within 80 characters of it (cost, took, takes, spent, faster, slower, speed-up,
   host time, GPU time, step time, latency, measured, benchmark, lavapipe, software driver, cold start, machine,
   a GPU model, or a before -> after arrow). So a default, a physical quantity or a behaviour in seconds passes
   ("dt 3 ms", "bounces inside the default 5 s window", "a timeout in ms", "after 2 s of idle"), and "a dispatch
   costs ~10 us of host time", "on the lavapipe machine, first step done 10.2 s" or "takes about 30 s there" fail;
4. a GPU model (``H100``, ``H200``, ``A100``, ``V100``, ``L40S``, ``RTX 4090``) within 40 characters of a number
   in the same sentence: the device a number was measured on. Naming a driver for a behaviour without a number
   ("lavapipe compiles a pipeline at its first dispatch") is fine.

Field descriptions and error messages are strings of the program, not comments, and are not read.
"""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("sopt", "problems")

_NUMBER = r"(?<![\w.^])(?P<approx>~\s?)?\d+(?:\.\d+)?(?:\s?-\s?\d+(?:\.\d+)?)?"
THROUGHPUT = re.compile(_NUMBER + r"\s?(?:[KMGT]i?B/s|[GT]FLOP(?:S|/s)?)\b", re.IGNORECASE)
SUB_MS = re.compile(_NUMBER + r"\s?(?:ns|us|µs|μs|microseconds?|nanoseconds?)(?![\w^/])")
SECONDS = re.compile(_NUMBER + r"\s?(?:ms|s|sec|secs|seconds?|milliseconds?|min|minutes?)(?![\w^/])")
GPU_MODEL = r"\b(?:H100|H200|A100|V100|L40S?|RTX ?\d{4})s?\b"
COST = re.compile(r"\b(?:costs?|costing|took|takes?|taking|spent|faster|slower|speed-?ups?|host time|GPU time|"
                  r"step time|latency|measured|benchmarks?|lavapipe|software driver|cold start|machine)\b|->|"
                  + GPU_MODEL, re.IGNORECASE)
DEVICE_NUMBER = re.compile(GPU_MODEL + r"[^.;]{0,40}?\d+|\d+[^.;\d]{0,40}?" + GPU_MODEL, re.IGNORECASE)
WINDOW = 80


def python_files() -> list[pathlib.Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def texts(path: pathlib.Path) -> Iterator[tuple[list[int], str]]:
    """Every comment block and docstring of ``path`` as (the line of each character, its lines joined by spaces)."""
    source = path.read_text(encoding="utf-8")
    blocks: list[list[tuple[int, str]]] = []
    last = -1
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if tok.start[0] != last + 1:
                blocks.append([])
            blocks[-1].append((tok.start[0], tok.string.lstrip("#").strip()))
            last = tok.start[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                blocks.append([(node.body[0].lineno + i, line.strip()) for i, line in enumerate(doc.splitlines())])
    for block in blocks:
        lines = [n for n, text in block for _ in range(len(text) + 1)]
        yield lines, " ".join(text for _, text in block)


def measurements(text: str) -> list[tuple[int, str]]:
    """(offset, the matched words) of every measurement in ``text`` by the module docstring's rules."""
    found = [(m.start(), m.group(0)) for m in THROUGHPUT.finditer(text)]
    found += [(m.start(), m.group(0)) for m in SUB_MS.finditer(text)]
    for m in SECONDS.finditer(text):
        near = text[max(0, m.start() - WINDOW):m.end() + WINDOW]
        if m.group("approx") or COST.search(near):
            found.append((m.start(), m.group(0)))
    found += [(m.start(), m.group(0)) for m in DEVICE_NUMBER.finditer(text)]
    return sorted(found)


@pytest.mark.parametrize("text, words", [
    ("a dispatch costs ~10 us of host time", ["~10 us"]),
    ("H200, 2D 2^18: 110 us with 1, 80 us with 2 or 4", ["H200, 2", "110 us", "80 us"]),
    ("measured on 2 H100s", ["2 H100s"]),
    ("on the 2-core lavapipe machine: first step done 10.2 s with it, 6.8-7.3 s without", ["10.2 s", "6.8-7.3 s"]),
    ("~3 s on a cold start", ["~3 s"]),
    ("the defaults take about 30 s there", ["30 s"]),
    ("entry points (~10 ms to list)", ["~10 ms"]),
    ("the backward kernel 826 -> 412 us", ["412 us"]),
    ("step GPU time 732 -> 714 ms", ["714 ms"]),
    ("a copy at 3000 GB/s", ["3000 GB/s"]),
    ("the kernel reaches 400 TFLOPS", ["400 TFLOPS"]),
    ("1000 steps on an RTX 4090: 8.9 ms", ["1000 steps on an RTX 4090", "8.9 ms"]),
])
def test_a_measurement_is_found(text: str, words: list[str]) -> None:
    assert [w for _, w in measurements(text)] == words


@pytest.mark.parametrize("text", [
    "At the defaults (dt 3 ms, 20 g) the stiffest mode stays stable", "a timeout in ms",
    "the ball lands within about 4 s and bounces at least once inside the default 5 s window",
    "the run stops after 2 s of idle", "lavapipe compiles a pipeline at its first dispatch",
    "G: gravitational constant in m^3 kg^-1 s^-2", "damping 0.3 N s/m", "a 64x64 image, 800 steps",
    "tiny-cuda-nn's H100 kernels", "half's normal range ends at 6.1e-5",
])
def test_behaviour_units_and_defaults_pass(text: str) -> None:
    assert measurements(text) == [], text


def test_comments_are_read_as_blocks_and_docstrings_whole_and_nothing_else(tmp_path) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""A module."""\n'
                    'x = 1  # a dispatch costs ~10\n'
                    '       # us of host time\n'
                    'def f():\n'
                    '    """Its first\n'
                    '    step done on an H100 in 2 s."""\n'
                    '    raise ValueError("took 5 ms")   # an error message is no comment\n', encoding="utf-8")
    found = [(lines[offset], words) for lines, text in texts(path) for offset, words in measurements(text)]
    assert found == [(2, "~10 us"), (6, "H100 in 2"), (6, "2 s")]


def test_no_comment_or_docstring_holds_a_measurement() -> None:
    bad = [f"{path.relative_to(ROOT)}:{lines[offset]}: {words!r}"
           for path in python_files() for lines, text in texts(path) for offset, words in measurements(text)]
    assert not bad, ("measurements in comments or docstrings (move them to benchmarks/RESULTS.md and say why "
                     "the code is so instead):\n" + "\n".join(bad))

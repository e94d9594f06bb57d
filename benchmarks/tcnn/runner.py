"""Builds and runs tiny-cuda-nn's training-step benchmark (bench.cu, through run.sh) and reads its results.

``run_bench`` calls ``benchmarks/tcnn/run.sh`` with the kit that ``make-kit.sh`` assembled: the first call builds
tiny-cuda-nn and ``tcnn_bench`` into ``build_dir`` (~100 s on 16 cores), later calls find the build done (ninja
rebuilds nothing) and only run. Every ``RESULT`` line the benchmark prints becomes one dict (``parse_result_line``).
``unavailable`` says why this machine cannot run it (no NVIDIA GPU, nvcc or cmake) before any work is done.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from typing import Any, Callable

HERE = pathlib.Path(__file__).resolve().parent
RUN_SH = HERE / "run.sh"
DEFAULT_BUILD_DIR = "/tmp/tcnn_build"
# tcnn-kit.patch writes this comment next to the 3D grid case: a kit without it compiles 2D grids only
GRID_3D_MARKER = "(2D and 3D grids kept)"
MODELS = ("hashgrid", "frequency", "identity")

_INT_KEYS = {"dims", "batch", "steps", "n_params"}
_STR_KEYS = {"model"}


def parse_result_line(line: str) -> dict[str, Any] | None:
    """One ``RESULT model=hashgrid dims=2 batch=16384 jit=1 steps=1000 mean_ms=0.14 ...`` line of tcnn_bench as a
    dict: ``model`` a str, ``dims``/``batch``/``steps``/``n_params``/``jit`` ints, every other value a float, and
    ``jit_failed`` True when the line says ``jit=0(jit_failed)`` (JIT fusion asked for, tcnn fell back to its
    classic kernels; ``jit`` is then 1, the mode asked for). None for any other line. ValueError for a RESULT
    line whose fields do not parse (``key=value`` pairs with the keys above)."""
    if not line.startswith("RESULT "):
        return None
    row: dict[str, Any] = {"jit_failed": False}
    for field in line.split()[1:]:
        key, sep, value = field.partition("=")
        if not sep or not value:
            raise ValueError(f"tcnn_bench RESULT line: field {field!r} is not key=value in {line!r}")
        if key == "jit":
            row["jit_failed"] = value.endswith("(jit_failed)")
            value = value.removesuffix("(jit_failed)")
            row["jit"] = 1 if row["jit_failed"] else int(value)
        elif key in _STR_KEYS:
            row[key] = value
        elif key in _INT_KEYS:
            row[key] = int(value)
        else:
            row[key] = float(value)
    for key in ("model", "dims", "batch", "jit", "mean_ms"):
        if key not in row:
            raise ValueError(f"tcnn_bench RESULT line has no {key}=: {line!r}")
    return row


def find_nvcc() -> str | None:
    """nvcc on PATH, else CUDA's default install path, else None (run.sh looks in the same two places)."""
    found = shutil.which("nvcc")
    if found:
        return found
    return "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None


def unavailable() -> str | None:
    """Why tiny-cuda-nn cannot be built and run here (a sentence), or None when it can: it needs an NVIDIA GPU
    (``nvidia-smi -L`` lists one), nvcc and cmake."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no NVIDIA GPU here (nvidia-smi not found)"
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no NVIDIA GPU here (nvidia-smi -L failed: {e})"
    if listed.returncode != 0 or "GPU" not in listed.stdout:
        return "no NVIDIA GPU here (nvidia-smi -L lists none)"
    if find_nvcc() is None:
        return "nvcc not found (PATH, /usr/local/cuda/bin)"
    if shutil.which("cmake") is None:
        return "cmake not found"
    return None


def check_kit(kit_dir: str | os.PathLike[str], dims: list[int]) -> pathlib.Path:
    """The kit folder, checked: it holds tiny-cuda-nn/ as make-kit.sh assembles it, with 3D grids compiled when
    ``dims`` has 3. ValueError naming the folder and the fix otherwise."""
    kit = pathlib.Path(kit_dir).resolve()
    cmake_lists = kit / "tiny-cuda-nn" / "CMakeLists.txt"
    if not cmake_lists.is_file():
        raise ValueError(f"--tcnn {kit_dir}: no {cmake_lists.relative_to(kit)} there; assemble the kit with "
                         "benchmarks/tcnn/make-kit.sh (see benchmarks/tcnn/README.md)")
    grid_h = kit / "tiny-cuda-nn" / "include" / "tiny-cuda-nn" / "encodings" / "grid.h"
    if 3 in dims and GRID_3D_MARKER not in grid_h.read_text(errors="replace"):
        raise ValueError(f"--tcnn {kit_dir}: this kit compiles 2D hash grids only (assembled by the shared "
                         "tools' make-kit.sh?); assemble it with benchmarks/tcnn/make-kit.sh for 3D inputs")
    return kit


def run_bench(kit_dir: str | os.PathLike[str], *, dims: list[int], models: list[str], batches: list[int],
              steps: list[int], warmup: int, build_dir: str = DEFAULT_BUILD_DIR,
              out: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Build (if not built) and run tcnn_bench for every dims x model x jit mode (0 and 1) x batch; ``steps[i]``
    timed steps at ``batches[i]``, after ``warmup`` untimed ones (they include JIT compilation). Each line the
    build and the runs print goes to ``out`` prefixed with ``[tcnn] ``. Returns the parsed RESULT lines.
    RuntimeError with the last lines of output when run.sh fails."""
    if len(steps) != len(batches):
        raise ValueError(f"run_bench: one steps value per batch, got {len(steps)} steps for {len(batches)} batches")
    for m in models:
        if m not in MODELS:
            raise ValueError(f"run_bench: model {m!r} is not one of {MODELS}")
    kit = check_kit(kit_dir, dims)
    rtc_cache = pathlib.Path(build_dir) / "rtc_cache"   # JIT-compiled kernels, reused across batches and calls
    rtc_cache.mkdir(parents=True, exist_ok=True)
    args = ["bash", str(RUN_SH), "--dims", ",".join(map(str, dims)), "--models", ",".join(models),
            "--batches", ",".join(map(str, batches)), "--steps", ",".join(map(str, steps)),
            "--warmup", str(warmup), "--jit", "both", "--rtc-cache", str(rtc_cache)]
    env = {**os.environ, "TCNN_KIT": str(kit), "BUILD_DIR": build_dir}
    rows, tail = [], []
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            out(f"[tcnn] {line}")
            tail = (tail + [line])[-30:]
            row = parse_result_line(line)
            if row is not None:
                rows.append(row)
    if proc.returncode != 0:
        raise RuntimeError(f"tiny-cuda-nn's run.sh exited with {proc.returncode}; last lines:\n" + "\n".join(tail))
    return rows

"""Does SlangPy release Python's GIL while it opens a device, loads a Slang module or builds a call site?

A thread that only counts (pure Python, so it needs the GIL) runs beside the main thread; for each operation the
main thread performs, the counter's rate during the operation is printed as a share of its rate while the main
thread sleeps. Near 0 %: the operation held the GIL throughout, so no other Python thread (a background
prefetch, a device opened in a thread) can make progress meanwhile, and overlapping it with Python work gains
nothing. Near 100 % (as for ``time.sleep``, or ``zlib.compress`` of a large buffer, the controls): it released
the GIL. In between (importing slangpy): Python code, taking turns with the counter. On a loaded machine the
rates vary, so read the shares against the controls of the same run.

Run from the repository root (nothing is written; the shader cache is used as by ``sopt run``)::

    python benchmarks/slangpy_gil.py                     # CUDA where it works, else Vulkan (as sopt picks)
    SOPT_DEVICE=cuda python benchmarks/slangpy_gil.py
"""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
import threading
import time
import zlib
from typing import Any, Callable

sys.modules["torch"] = None   # as `sopt run`: slangpy's torch bridge is not needed (and costs seconds to import)
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_count = 0
_running = True


def _spin() -> None:
    global _count
    while _running:
        _count += 1


def _rate(seconds: float) -> float:
    """Counts per second while the main thread sleeps ``seconds``."""
    before, began = _count, time.perf_counter()
    time.sleep(seconds)
    return (_count - before) / (time.perf_counter() - began)


def measure(name: str, operation: Callable[[], Any], free_rate: float) -> Any:
    """Run ``operation`` on this thread; print its seconds and the counter's share of ``free_rate`` meanwhile."""
    before, began = _count, time.perf_counter()
    result = operation()
    seconds = time.perf_counter() - began
    share = (_count - before) / seconds / free_rate
    print(f"  {name:<52} {seconds:7.3f} s   counter at {share:5.0%} of its free rate", flush=True)
    return result


def main() -> int:
    global _running
    counter = threading.Thread(target=_spin, name="gil-counter", daemon=True)
    counter.start()
    free = _rate(0.5)
    print(f"counter free rate {free:.3g}/s; each operation, then the counter's share of that rate meanwhile:")
    spy = measure("import slangpy", lambda: importlib.import_module("slangpy"), free)
    from sopt.runtime import device as dev
    import numpy as np
    device = measure("open the device (sopt.get_device: spy.Device)", dev.get_device, free)
    print(f"  (device: {dev.device_kind()}, {device.info.adapter_name})")
    lib = dev.slang_lib_path()
    launch = ROOT / "problems" / "fit_projectile" / "launch.slang"
    module = measure("spy.Module.load_from_file (fit_projectile/launch)",
                     lambda: spy.Module.load_from_file(device, str(launch)), free)
    measure("device.load_module (sim/projectile)", lambda: device.load_module(str(lib / "sim" / "projectile.slang")),
            free)
    function = module.require_function("launch_velocity")
    speed, angle = (spy.Tensor.from_numpy(device, np.full(8, v, np.float32)) for v in (10.0, 45.0))
    measure("first call of launch_velocity (call data built)", lambda: function(speed, angle), free)
    measure("second call (call data cached)", lambda: function(speed, angle), free)
    data = os.urandom(1 << 23)
    measure("control: time.sleep(0.3) (releases)", lambda: time.sleep(0.3), free)
    measure("control: zlib.compress of 8 MiB (releases)", lambda: zlib.compress(data, 6), free)
    _running = False
    return 0


if __name__ == "__main__":
    sys.exit(main())

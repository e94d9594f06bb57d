"""Issue 21's accuracy target: the image problem's PSNR with half precision within 0.2 dB of float32.

Runs ``sopt run --problem neural_field_image`` once per seed for each network (same config, same seed: the same
initial table and batch stream), float32 (``FullyFusedMLP``, float32 table sums) against half precision
(``TensorCoreMLP``: half operands on tensor cores, float32 accumulation and master weights; float16 table sums),
and prints each run's final PSNR (every pixel), the means, and the paired difference with its standard error::

    SOPT_DEVICE=cuda python3 benchmarks/half_precision_psnr.py --seeds 3 --preset photo
    SOPT_DEVICE=cuda python3 benchmarks/half_precision_psnr.py --seeds 8 --preset default

Presets (each a list of ``sopt run`` overrides on top of the problem's defaults, with a HashGrid encoding):

* ``photo``: matplotlib's sample photograph (``grace_hopper.jpg``, 512 px on its longer side), batch 2^14, 2000
  steps, table 2^14 entries per level: the network cannot store the photograph, so the PSNR measures the fit's
  quality and barely moves with the seed.
* ``photo19``: the same with the default 2^19 table, which stores the photograph almost exactly (60-75 dB).
* ``default``: the problem's generated 64 x 64 image, 2000 steps; also near-exact storage.

Where the network stores its image almost exactly, the final PSNR is set by where the optimiser's noise leaves the
last steps, and runs differ by several dB with the seed (and between runs of one seed: float atomics sum in a
different order each time), for float32 alone as much as for half: compare means over many seeds there, and read
the standard error printed beside the difference. TensorCoreMLP is CUDA-only.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
NETWORKS = {
    "float32": ["network.otype=FullyFusedMLP", "encoding.gradient_precision=float32"],
    "half": ["network.otype=TensorCoreMLP", "encoding.gradient_precision=float16"],
}


def photo_path() -> str:
    """matplotlib's sample photograph (it ships with matplotlib: no download)."""
    import matplotlib.cbook

    return str(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))


def preset_overrides(preset: str, steps: int) -> list[str]:
    common = ["encoding.otype=HashGrid", f"steps={steps}"]
    if preset == "default":
        return common
    photo = [f"image={photo_path()}", "image_size=512", "batch_size=16384"]
    return common + photo + (["encoding.log2_hashmap_size=14"] if preset == "photo" else [])


def final_psnr(overrides: list[str], out: pathlib.Path) -> float:
    """Runs the image problem with ``overrides`` into ``out``; its summary's final PSNR (dB)."""
    command = [sys.executable, "-m", "sopt", "run", "--problem", "neural_field_image", *overrides, "--out", str(out),
               "--no-progress"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return float(json.loads((out / "summary.json").read_text())["metrics"]["psnr"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=["photo", "photo19", "default"], default="photo")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1, each run once per network")
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    if args.seeds < 1:
        raise SystemExit(f"--seeds must be at least 1, got {args.seeds}")
    base = preset_overrides(args.preset, args.steps)
    psnr: dict[str, list[float]] = {name: [] for name in NETWORKS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for name, network in NETWORKS.items():
                psnr[name].append(final_psnr([*base, *network, f"seed={seed}"], pathlib.Path(tmp) / f"{name}-{seed}"))
                print(f"seed {seed} {name:8s} {psnr[name][-1]:.3f} dB", flush=True)
    diff = [h - f for h, f in zip(psnr["half"], psnr["float32"])]
    error = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
    print(f"preset {args.preset}, {args.seeds} seed(s), {args.steps} steps: float32 mean "
          f"{statistics.mean(psnr['float32']):.3f} dB, half mean {statistics.mean(psnr['half']):.3f} dB, "
          f"half - float32 {statistics.mean(diff):+.3f} dB (standard error {error:.3f} dB; target: within 0.2 dB)")


if __name__ == "__main__":
    main()

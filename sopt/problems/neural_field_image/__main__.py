"""Command line: ``python -m sopt.problems.neural_field_image [--image PATH] [--config FILE] [--steps N] [--out DIR]``."""

from __future__ import annotations

import argparse
import pathlib
import sys

import sopt
from sopt.data import generated_image, load_image
from sopt.problems.neural_field_image.config import load_config
from sopt.problems.neural_field_image.run import fit_image
from sopt.train import NonFiniteError


def _check_out(out: str) -> None:
    """ValueError for an --out that cannot be a folder: empty, a file, or under a file."""
    if not out:
        raise ValueError("--out '' names no folder; give a folder path")
    path = pathlib.Path(out)
    for folder in (path, *path.parents):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--out {out!r}: {str(folder)!r} is a file, not a folder")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sopt.problems.neural_field_image",
                                     description="Fit an RGB image with an encoding + MLP (a neural field).")
    parser.add_argument("--image", help="PNG/JPEG/... to fit (downscaled to image_size); default: a generated image")
    parser.add_argument("--config", help="JSON config merged over the defaults (tiny-cuda-nn layout)")
    parser.add_argument("--steps", type=int, help="training steps (overrides the config)")
    parser.add_argument("--out", default="runs/neural_field_image", help="output folder (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        # --image and --steps are config keys: validated with the rest ('' and missing files are errors)
        config = load_config(args.config, steps=args.steps, image=args.image)
        _check_out(args.out)
        if config.image is not None:
            image = load_image(config.image, max_side=config.image_size)
        else:
            image = generated_image(config.image_size)
        device = sopt.get_device()
    except (ValueError, sopt.device.DeviceUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"device: {sopt.device_kind()} ({device.info.adapter_name}); image {image.shape[1]}x"
          f"{image.shape[0]} from {config.image or 'the generator'}; {config.steps} steps of {config.batch_size} "
          "pixels")
    try:
        result = fit_image(image, config, args.out, progress=not args.no_progress)
    except NonFiniteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"stopped: {result.train.stop_reason} after {result.train.steps} steps in {result.seconds:.1f} s")
    print(f"wrote {args.out}/reconstruction.png, curves.png, metrics.jsonl, checkpoint.npz")
    print(f"final PSNR: {result.psnr:.2f} dB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

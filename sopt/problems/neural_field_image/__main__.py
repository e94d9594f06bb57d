"""Command line: ``python -m sopt.problems.neural_field_image [--image PATH] [--config FILE] [--steps N] [--out DIR]``."""

from __future__ import annotations

import argparse
import sys

import sopt
from sopt.problems.neural_field_image.config import load_config
from sopt.problems.neural_field_image.run import fit_image
from sopt.data import generated_image, load_image
from sopt.train import NonFiniteError


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
        config = load_config(args.config, steps=args.steps)
        if args.image:
            image = load_image(args.image, max_side=config["image_size"])
        else:
            image = generated_image(config["image_size"])
        device = sopt.get_device()
    except (ValueError, sopt.device.DeviceUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"device: {sopt.device_kind()} ({device.info.adapter_name}); image {image.shape[1]}x"
          f"{image.shape[0]} from {args.image or 'the generator'}; {config['steps']} steps of {config['batch_size']} pixels")
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

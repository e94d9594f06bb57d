"""Fit an image with a frequency encoding + MLP through sopt's API, and write the reconstruction as a PNG.

Run: python examples/fit_image.py [IMAGE] [OUT.png]   (default: a generated 64x64 test image)
"""

from __future__ import annotations

import sys

import numpy as np

import sopt
from sopt import losses, nn
from sopt.data import generated_image, load_image, pixel_coordinates, psnr, save_image
from sopt.optim.lr_scheduler import WarmupCosineLR
from sopt.train import BatchSampler, Evaluate, Trainer

STEPS = 800

# Data: pixel-centre coordinates (x, y) in (0, 1)^2 -> RGB in [0, 1]; batches are drawn on the GPU.
image = load_image(sys.argv[1], max_side=64) if len(sys.argv) > 1 else generated_image(64)
h, w, _ = image.shape
colours = image.reshape(-1, 3)
sampler = BatchSampler(pixel_coordinates(h, w), colours, batch_size=2048, seed=0)

# Model: sin/cos of 6 octaves per coordinate, then 2 hidden layers of 64 ReLU units, trained with Adam.
model = nn.MLP(2, 3, hidden_features=64, hidden_layers=2, encoding={"otype": "Frequency", "n_frequencies": 6})
optimizer = sopt.optim.Adam(model.parameters(), lr=2e-2, betas=(0.9, 0.99))
scheduler = WarmupCosineLR(optimizer, warmup_steps=20, total_steps=STEPS, eta_min=1e-3)


def reconstruct() -> np.ndarray:
    """The model on every pixel (sampler.inputs holds them all), clipped to [0, 1], as an (H, W, 3) image."""
    return np.clip(model.forward(sampler.inputs).to_numpy(), 0.0, 1.0).reshape(h, w, 3)


evaluate = Evaluate(lambda trainer: {"psnr": psnr(reconstruct(), image)}, every=100)
trainer = Trainer(model, losses.MSELoss(), optimizer, sampler, scheduler=scheduler, callbacks=[evaluate],
                  log_every=25)
result = trainer.fit(STEPS)

out = sys.argv[2] if len(sys.argv) > 2 else "fit_image.png"
save_image(out, reconstruct())
print(f"wrote {out}; final PSNR {result.metrics['psnr']:.2f} dB after {result.steps} steps")

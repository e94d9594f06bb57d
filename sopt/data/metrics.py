"""Image-quality metrics on host arrays."""

from __future__ import annotations

import math

import numpy as np

from sopt.utils.validation import as_real_array, check_float


def psnr(prediction: np.ndarray, target: np.ndarray, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB: ``10 * log10(data_range^2 / mean((prediction - target)^2))``.

    Both arrays must have the same shape; inf when they are equal. Clip the prediction to the data range
    first to measure what the image shows.
    """
    data_range = check_float(data_range, "data_range", low=0.0, low_inclusive=False)
    p, t = as_real_array(prediction, "prediction"), as_real_array(target, "target")
    if p.shape != t.shape:
        raise ValueError(f"prediction and target must have the same shape, got {p.shape} and {t.shape}")
    mse = float(np.mean((p - t) ** 2))
    return math.inf if mse == 0.0 else 10.0 * math.log10(data_range**2 / mse)

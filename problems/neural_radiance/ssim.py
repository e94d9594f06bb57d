"""SSIM of rendered views (Wang, Bovik, Sheikh & Simoncelli 2004) as NeRF papers report it: scikit-image's
``structural_similarity`` with the paper's Gaussian window (11 x 11, sigma 1.5, population covariances), data
range 1, averaged over the RGB channels::

    SSIM = ((2 mu_x mu_y + C1) (2 s_xy + C2)) / ((mu_x^2 + mu_y^2 + C1) (s_x^2 + s_y^2 + C2)),
    C1 = 0.01^2, C2 = 0.03^2,

local statistics under the window, averaged over the positions where it fits inside the image. scikit-image
comes with ``pip install 'sopt[radiance]'`` (also in the ``test`` and ``mesh`` extras).
"""

from __future__ import annotations

import numpy as np

INSTALL = "pip install 'sopt[radiance]' (scikit-image)"
MIN_SIDE = 11   # the Gaussian window's side


def missing() -> str | None:
    """Why :func:`ssim` cannot run here (scikit-image not installed), or None."""
    try:
        import skimage.metrics  # noqa: F401
    except ImportError as exc:
        return f"neural_radiance's ssim needs scikit-image ({exc}); {INSTALL}"
    return None


def ssim(prediction: np.ndarray, truth: np.ndarray) -> float:
    """The mean SSIM of two (H, W, 3) images with values in [0, 1], both sides at least 11 pixels (ValueError
    otherwise)."""
    from skimage.metrics import structural_similarity
    x, y = np.asarray(prediction, np.float64), np.asarray(truth, np.float64)
    if x.shape != y.shape or x.ndim != 3 or x.shape[2] != 3:
        raise ValueError(f"ssim needs two (H, W, 3) images of one shape, got {x.shape} and {y.shape}")
    if min(x.shape[:2]) < MIN_SIDE:
        raise ValueError(f"ssim needs images of at least {MIN_SIDE} x {MIN_SIDE} pixels, got {x.shape[1]} x {x.shape[0]}")
    return float(structural_similarity(x, y, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                       data_range=1.0, channel_axis=-1))

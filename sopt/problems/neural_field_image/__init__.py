"""Neural field of an RGB image: an encoding + MLP maps pixel coordinates (x, y) in (0, 1)^2 to colour,
trained with sopt.train on random pixels drawn on the GPU.

Run ``python -m sopt.problems.neural_field_image [--image PATH] [--config FILE] [--steps N] [--out DIR]`` from the
repository root; without ``--image`` it fits a procedurally generated 64x64 test image. The configuration
(``config.DEFAULT_CONFIG``) follows tiny-cuda-nn's JSON layout.
"""

from sopt.problems.neural_field_image.config import DEFAULT_CONFIG, load_config
from sopt.problems.neural_field_image.run import FitResult, fit_image

__all__ = ["DEFAULT_CONFIG", "FitResult", "fit_image", "load_config"]

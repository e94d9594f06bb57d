"""Neural field of an RGB image: an encoding + MLP maps pixel coordinates (x, y) in (0, 1)^2 to colour,
trained with sopt.train on random pixels drawn on the GPU.

:class:`NeuralFieldImage` is the problem ``sopt run`` drives (schema :class:`NeuralFieldImageConfig`, every key
documented, tiny-cuda-nn's layout); :func:`fit_image` trains it on an image array in this process. From the
command line: ``sopt run --problem neural_field_image [image=PATH] [steps=N] [--out DIR]`` (or ``python -m
problems.neural_field_image ...``, the same command); without ``image`` it fits a generated 64x64 image.
"""

from problems.neural_field_image.config import DEFAULT_CONFIG, NeuralFieldImageConfig, load_config
from problems.neural_field_image.problem import NeuralFieldImage
from problems.neural_field_image.run import FitResult, fit_image

__all__ = ["DEFAULT_CONFIG", "FitResult", "NeuralFieldImage", "NeuralFieldImageConfig", "fit_image", "load_config"]

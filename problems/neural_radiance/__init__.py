"""Neural radiance field from posed images: a hash-grid network gives density and colour at points of the scene box,
differentiable volume rendering along pixel rays (ray marching through an occupancy grid that skips empty space,
alpha compositing with a hand-written backward; Slang kernels in this folder) gives pixel colours, trained on random
rays of the training views and measured by PSNR and SSIM on held-out views.

:class:`NeuralRadiance` is the problem ``sopt run`` drives (schema :class:`NeuralRadianceConfig`). From the
command line: ``sopt run --problem neural_radiance [data=PATH] [steps=N] [--out DIR]`` (or ``python -m
problems.neural_radiance ...``); without ``data`` it fits the built-in scene (scene.py), with ``data`` a
NeRF-synthetic folder (nerf_synthetic.py).
"""

from problems.neural_radiance.config import DEFAULT_CONFIG, NeuralRadianceConfig, load_config

__all__ = ["DEFAULT_CONFIG", "NeuralRadianceConfig", "load_config"]

"""Neural signed distance field of a triangle mesh: a hash-grid encoding + network maps (x, y, z) in the unit box to
the mesh's signed distance, trained with sopt.train on points whose exact signed distance the GPU computes (the
distance to the nearest triangle, the sign from the generalised winding number).

:class:`NeuralSDF` is the problem ``sopt run`` drives (schema :class:`NeuralSDFConfig`, every key documented,
tiny-cuda-nn's layout). From the command line: ``sopt run --problem neural_sdf [mesh=PATH] [steps=N] [--out DIR]``
(or ``python -m problems.neural_sdf ...``, the same command); without ``mesh`` it fits the packaged wavy torus.
Needs trimesh and scikit-image (``pip install 'sopt[mesh]'``).
"""

from problems.neural_sdf.config import DEFAULT_CONFIG, NeuralSDFConfig, load_config
from problems.neural_sdf.problem import NeuralSDF

__all__ = ["DEFAULT_CONFIG", "NeuralSDF", "NeuralSDFConfig", "load_config"]

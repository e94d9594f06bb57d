import importlib.util
import pathlib

import numpy as np


def test_seed_polynomial_example_gives_the_right_numbers():
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "polynomial.py"
    spec = importlib.util.spec_from_file_location("polynomial_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    y, dy = module.polynomial(np.array([1, 2, 3, 4]))
    np.testing.assert_array_equal(y, [9, 23, 41, 63])
    np.testing.assert_array_equal(dy, [12, 16, 20, 24])

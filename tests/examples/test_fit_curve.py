import importlib.util
import pathlib

import numpy as np


def test_fit_curve_example_recovers_the_cubic():
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "fit_curve.py"
    spec = importlib.util.spec_from_file_location("fit_curve_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fitted, mse = module.fit_cubic(steps=300)
    np.testing.assert_allclose(fitted, module.TRUE, atol=0.03)
    assert mse < 0.0035  # the noise variance is 0.0025; coefficients from zero would give an MSE of ~5

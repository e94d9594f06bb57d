"""FrequencyEncoding: tcnn's layout against numpy, its derivative, gradcheck."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.nn import FrequencyEncoding, gradcheck, vjp
from tests.nn.reference import frequency as ref_frequency


@pytest.fixture(scope="module")
def encodings() -> dict[tuple[int, int], FrequencyEncoding]:
    return {(d, k): FrequencyEncoding(d, k) for d, k in [(1, 1), (2, 3), (3, 4)]}


@pytest.mark.parametrize("dims,freqs", [(1, 1), (2, 3), (3, 4)])
def test_layout_values_and_input_gradient(encodings, dims, freqs):
    enc = encodings[(dims, freqs)]
    assert (enc.in_features, enc.out_features) == (dims, dims * freqs * 2)
    rng = np.random.default_rng(dims)
    x = rng.uniform(-1, 1, size=(13, dims)).astype(np.float32)
    dy = rng.normal(size=(13, enc.out_features)).astype(np.float32)
    y, dx, grads = vjp(enc, x, dy)
    ry, jac = ref_frequency(x.astype(np.float64), freqs)
    np.testing.assert_allclose(y, ry, atol=2e-6)
    np.testing.assert_allclose(dx, np.einsum("no,noi->ni", dy.astype(np.float64), jac), rtol=1e-5, atol=1e-4)
    assert grads == {}


def test_explicit_layout():
    enc = FrequencyEncoding(2, 2)
    y, _, _ = vjp(enc, np.array([[0.25, 0.5]]), np.zeros((1, 8)))
    s = np.sqrt(0.5)
    # per dimension: sin(pi x), cos(pi x), sin(2 pi x), cos(2 pi x)
    np.testing.assert_allclose(y[0], [s, s, 1, 0, 1, 0, 0, -1], atol=1e-6)


@pytest.mark.parametrize("dims,freqs", [(2, 3), (3, 4)])
def test_gradcheck(encodings, dims, freqs):
    x = np.random.default_rng(5).uniform(0, 1, size=(7, dims))
    result = gradcheck(encodings[(dims, freqs)], x, eps=1e-4, atol=2e-3, n_checks=10)
    assert result.ok, str(result)


def test_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_freqs"):
        FrequencyEncoding(2, 0)
    with pytest.raises(ValueError, match="n_freqs must be <= 24"):
        FrequencyEncoding(2, 40)

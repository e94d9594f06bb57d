import math

import numpy as np
import pytest

import sopt
from sopt.nn import init


def _p(shape):
    return sopt.Parameter(np.zeros(shape), name="w")


def test_seeded_initialisers_are_reproducible_and_differ_by_seed():
    a, b, c = _p((64, 32)), _p((64, 32)), _p((64, 32))
    init.kaiming_uniform_(a, seed=1)
    init.kaiming_uniform_(b, seed=1)
    init.kaiming_uniform_(c, seed=2)
    assert np.array_equal(a.numpy(), b.numpy()) and not np.array_equal(a.numpy(), c.numpy())


@pytest.mark.parametrize("fn,kwargs,bound,std", [
    (init.xavier_uniform_, {}, math.sqrt(6 / (200 + 100)), None),
    (init.xavier_normal_, {"gain": 2.0}, None, 2 * math.sqrt(2 / 300)),
    (init.kaiming_uniform_, {"nonlinearity": "relu"}, math.sqrt(2) * math.sqrt(3 / 100), None),
    (init.kaiming_normal_, {"mode": "fan_out", "nonlinearity": "relu"}, None, math.sqrt(2) / math.sqrt(200)),
    (init.kaiming_uniform_, {"a": math.sqrt(5)}, 1 / math.sqrt(100), None),  # torch.nn.Linear's default
])
def test_fan_based_initialisers_follow_torch_conventions(fn, kwargs, bound, std):
    p = _p((200, 100))  # (out_features, in_features): fan_in = 100, fan_out = 200
    fn(p, seed=3, **kwargs)
    values = p.numpy()
    if bound is not None:
        assert np.abs(values).max() <= bound * (1 + 1e-6)
        assert np.abs(values).max() > 0.99 * bound
        np.testing.assert_allclose(values.std(), bound / math.sqrt(3), rtol=0.02)
    else:
        np.testing.assert_allclose(values.std(), std, rtol=0.02)
        assert abs(values.mean()) < 0.05 * std


def test_simple_initialisers():
    p = _p((3, 4))
    init.constant_(p, 0.25)
    assert np.all(p.numpy() == 0.25)
    init.zeros_(p)
    assert not p.numpy().any()
    init.uniform_(p, -2, -1, seed=0)
    assert p.numpy().min() >= -2 and p.numpy().max() <= -1
    init.normal_(p, mean=5.0, std=0.0)
    assert np.all(p.numpy() == 5.0)


def test_bad_initialiser_arguments():
    with pytest.raises(ValueError, match="nonlinearity must be one of"):
        init.kaiming_uniform_(_p((3, 3)), nonlinearity="swish")
    with pytest.raises(ValueError, match=r">= 2 dimensions, got shape \(5,\)"):
        init.xavier_uniform_(_p((5,)))
    with pytest.raises(ValueError, match="mode must be"):
        init.kaiming_normal_(_p((3, 3)), mode="fan_avg")
    with pytest.raises(ValueError, match="std must be in"):
        init.normal_(_p((3,)), std=-1.0)


@pytest.mark.parametrize("call,name", [
    (lambda p: init.uniform_(p, seed="1"), "seed"),
    (lambda p: init.normal_(p, seed=True), "seed"),
    (lambda p: init.uniform_(p, a="0"), "a"),
    (lambda p: init.constant_(p, True), "value"),
    (lambda p: init.xavier_uniform_(p, gain="2"), "gain"),
    (lambda p: init.xavier_normal_(p, gain=None), "gain"),
    (lambda p: init.kaiming_uniform_(p, a="0.1"), "a"),
    (lambda p: init.kaiming_normal_(p, mode=["fan_in"]), "mode"),
    (lambda p: init.kaiming_normal_(p, nonlinearity=5), "nonlinearity"),
])
def test_initialiser_arguments_of_the_wrong_type(call, name):
    p = _p((3, 3))
    before = p.numpy()
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        call(p)
    np.testing.assert_array_equal(p.numpy(), before)


def test_uniform_range_beyond_float32_is_refused():
    p = _p((3,))
    with pytest.raises(ValueError, match="too large for float32"):
        init.uniform_(p, -1e300, 1e300)

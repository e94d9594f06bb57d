import numpy as np
import pytest
import slangpy as spy

import sopt


def test_parameter_round_trips_values_and_gradients():
    a = np.arange(6, dtype=np.float64).reshape(2, 3) / 7
    p = sopt.Parameter(a, name="w")
    assert p.shape == (2, 3) and p.size == 6 and p.name == "w"
    np.testing.assert_array_equal(p.numpy(), a.astype(np.float32))
    assert p.numpy().dtype == np.float32
    np.testing.assert_array_equal(p.grad_numpy(), np.zeros((2, 3)))
    p.set_grad(-a)
    np.testing.assert_array_equal(p.grad_numpy(), (-a).astype(np.float32))
    p.load(np.ones((2, 3)))
    np.testing.assert_array_equal(p.numpy(), np.ones((2, 3)))
    p.zero_grad()
    assert not p.grad_numpy().any()


def test_parameter_tensor_is_a_differentiable_argument():
    # d/dx sum(a x^2 + b x + c) = 2 a x + b accumulates into the Parameter's gradient, twice -> doubled
    device = sopt.get_device()
    module = spy.Module.load_from_source(device, "poly_param", """
        import "slangpy";
        [Differentiable]
        void f(int i, IDiffTensor<float, 1> x, IWDiffTensor<float, 1> y) { float v = x[i]; y[i] = 3 * v * v + 2 * v + 1; }
    """)
    p = sopt.Parameter([1.0, -2.0, 0.5])
    y = spy.Tensor.empty(device, (3,), "float").with_grads()
    y.grad.copy_from_numpy(np.ones(3, np.float32))
    for _ in range(2):
        module.f(i=spy.grid((3,)), x=p.tensor, y=y)
        module.f.bwds(i=spy.grid((3,)), x=p.tensor, y=y)
    np.testing.assert_allclose(p.grad_numpy(), 2 * (6 * np.array([1.0, -2.0, 0.5]) + 2))


def test_parameter_tensor_follows_the_double_buffered_arena_across_steps():
    """With the default optimiser the values alternate between two sides of the arena: ``p.tensor`` fetched
    after each step reads the updated values and accumulates into the one gradient the optimiser consumes."""
    device = sopt.get_device()
    module = spy.Module.load_from_source(device, "square_param", """
        import "slangpy";
        [Differentiable]
        void f(int i, IDiffTensor<float, 1> x, IWDiffTensor<float, 1> y) { float v = x[i]; y[i] = v * v; }
    """)
    x = np.array([1.0, -2.0, 0.5], np.float32)
    p = sopt.Parameter(x)
    opt = sopt.optim.SGD([p], lr=0.1)
    assert opt.arena.double
    y = spy.Tensor.empty(device, (3,), "float").with_grads()
    y.grad.copy_from_numpy(np.ones(3, np.float32))
    sides = set()
    for _ in range(3):
        sides.add(p.values.offset)
        module.f(i=spy.grid((3,)), x=p.tensor, y=y)
        np.testing.assert_allclose(y.to_numpy(), x * x, rtol=1e-6)
        module.f.bwds(i=spy.grid((3,)), x=p.tensor, y=y)
        np.testing.assert_allclose(p.grad_numpy(), 2 * x, rtol=1e-6)
        opt.step()
        x = x - np.float32(0.1) * (2 * x)
        np.testing.assert_allclose(p.numpy(), x, rtol=1e-6)
    assert len(sides) == 2


def test_parameter_views_follow_the_arena():
    p, q = sopt.Parameter(np.ones(3)), sopt.Parameter(np.full((2, 2), 2.0))
    opt = sopt.optim.SGD([p, q], lr=1.0, skip_nonfinite=False)
    assert p.tensor.storage is opt.arena.buffer and p.grad.storage is opt.arena.buffer
    q.set_grad(np.full((2, 2), 0.5))
    opt.step()
    np.testing.assert_array_equal(q.numpy(), np.full((2, 2), 1.5))
    np.testing.assert_array_equal(p.numpy(), np.ones(3))


@pytest.mark.parametrize("bad,match", [
    ([1.0, float("nan")], "non-finite"),
    ([1.0, float("inf")], "non-finite"),
    ("abc", "got the string 'abc'"),
    ([[1.0, 2.0], [3.0]], "convertible to a float array"),
])
def test_bad_arrays_raise_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        sopt.Parameter(bad, name="x")


def test_load_with_wrong_shape_raises():
    p = sopt.Parameter(np.zeros((2, 3)), name="w")
    with pytest.raises(ValueError, match=r"w values has shape \(3, 2\), expected \(2, 3\)"):
        p.load(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"w grad has shape \(6,\), expected \(2, 3\)"):
        p.set_grad(np.zeros(6))


@pytest.mark.parametrize("bad,match", [
    ([1.0, 1e300], r"1 value\(s\) too large for float32 \(largest magnitude 1e\+300"),
    ([1e39, -5e38, 2.0], r"2 value\(s\) too large for float32 \(largest magnitude 1e\+39"),
    (np.zeros(0), r"has 0 elements \(shape \(0,\)\)"),
    (np.zeros((3, 0)), r"has 0 elements \(shape \(3, 0\)\)"),
    (np.array(2.5), r"is 0-d .*pass \[2\.5\] for shape \(1,\)"),
    ([1.0 + 2.0j], "complex"),
    (np.array([1.0, 2.0], np.complex64), "complex"),
    (None, "got None"),
    ("1.5", "got the string '1.5'"),
    ([1.0, None], "holding NoneType None"),
    ({"a": 1.0}, "holding dict"),
])
def test_parameter_rejects_values_it_could_not_store_as_given(bad, match):
    with pytest.raises(ValueError, match=match):
        sopt.Parameter(bad, name="x")


def test_parameter_keeps_the_largest_float32_value():
    top = float(np.finfo(np.float32).max)
    p = sopt.Parameter([top, -top, 1.0], name="edge")
    np.testing.assert_array_equal(p.numpy(), np.array([top, -top, 1.0], np.float32))


def test_load_rejects_values_beyond_float32_and_leaves_the_values():
    p = sopt.Parameter([1.0, 2.0], name="w")
    with pytest.raises(ValueError, match=r"w values contains 1 value\(s\) too large for float32 \(largest magnitude 1e\+39"):
        p.load([1e39, 0.0])
    with pytest.raises(ValueError, match="complex"):
        p.load(np.array([1.0, 2.0 + 1.0j]))
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])


def test_set_grad_turns_out_of_range_values_into_inf_and_rejects_non_numbers():
    p = sopt.Parameter([1.0, 2.0], name="w")
    p.set_grad([1e39, -3.0])
    np.testing.assert_array_equal(p.grad_numpy(), [np.inf, -3.0])
    with pytest.raises(ValueError, match="w grad must be an array of numbers, got None"):
        p.set_grad(None)


@pytest.mark.parametrize("name", [5, "", b"w"])
def test_parameter_name_must_be_a_string(name):
    with pytest.raises(ValueError, match="Parameter name must be a non-empty string"):
        sopt.Parameter([1.0], name=name)

"""ParameterWindow: a named strided part of a Parameter, reading and writing the base's elements."""

from __future__ import annotations

import numpy as np
import pytest

import sopt
from sopt.autodiff.parameter_window import ParameterWindow, make_windows, storage_of


def _windows() -> tuple[sopt.Parameter, ParameterWindow, ParameterWindow]:
    # a (3, 2) weight in rows of 4 (two padding columns), then a bias of 3 at element 12
    base = sopt.Parameter(np.arange(16, dtype=np.float32), name="flat")
    w, b = make_windows(base, [("weight", "0.weight", (3, 2), (4, 1), 0), ("bias", "0.bias", (3,), (1,), 12)])
    return base, w, b


def test_a_window_reads_and_writes_its_elements_of_the_base() -> None:
    base, w, b = _windows()
    assert w.shape == (3, 2) and w.size == 6 and w.siblings == (w, b) and storage_of(w) is base
    np.testing.assert_array_equal(w.numpy(), [[0, 1], [4, 5], [8, 9]])
    np.testing.assert_array_equal(w.values.to_numpy(), w.numpy())   # the device view is the same window
    np.testing.assert_array_equal(b.numpy(), [12, 13, 14])
    version = base.version
    w.load(-np.ones((3, 2)))
    assert w.version == base.version == version + 1
    expected = np.arange(16, dtype=np.float32)
    expected[[0, 1, 4, 5, 8, 9]] = -1
    np.testing.assert_array_equal(base.numpy(), expected)   # the padding columns 2, 3 kept theirs
    b.set_grad([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(base.grad_numpy()[12:15], [1, 2, 3])
    np.testing.assert_array_equal(b.grad.to_numpy(), [1, 2, 3])
    w.set_grad(np.full((3, 2), 5.0))
    b.zero_grad()
    assert not b.grad_numpy().any() and (w.grad_numpy() == 5).all()
    with pytest.raises(ValueError, match=r"0.weight values has shape \(2, 3\), expected \(3, 2\)"):
        w.load(np.zeros((2, 3)))


def test_windows_must_be_distinct_elements_of_the_base() -> None:
    base = sopt.Parameter(np.zeros(8, np.float32), name="flat")
    with pytest.raises(ValueError, match=r"^ParameterWindow 'a': shape \(3,\), strides \(4,\) from element 0 must "
                                         r"name distinct elements of 'flat''s 8$"):
        make_windows(base, [("a", "a", (3,), (4,), 0)])
    with pytest.raises(ValueError, match=r"^the windows \['a', 'b'\] of 'flat' overlap$"):
        make_windows(base, [("a", "a", (4,), (1,), 0), ("b", "b", (2,), (1,), 3)])
    (a,) = make_windows(base, [("a", "a", (4,), (1,), 0)])
    with pytest.raises(ValueError, match="base must be a \\(non-window\\) Parameter"):
        make_windows(a, [("b", "b", (2,), (1,), 0)])

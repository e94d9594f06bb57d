"""sopt.runtime.cuda_array: zero-copy torch views of sopt buffers on the GPU that holds them."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

from sopt.runtime import device as dev
from sopt.runtime.cuda_array import buffer_view, tensor_view

torch = pytest.importorskip("torch")


def test_a_view_past_the_buffer_is_refused_before_any_gpu_work():
    t = spy.Tensor.from_numpy(dev.get_device(), np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"elements \[4, 16\) do not fit a buffer of 12 float32"):
        buffer_view(t.storage, (12,), offset=4)


@pytest.mark.skipif(dev.get_device().info.type != spy.DeviceType.cuda, reason="CUDA views need sopt on CUDA")
def test_views_share_memory_both_ways_on_the_current_gpu():
    t = spy.Tensor.from_numpy(dev.get_device(), np.arange(12, dtype=np.float32).reshape(3, 4))
    view = tensor_view(t)
    assert view.shape == (3, 4) and view.device == torch.device("cuda", torch.cuda.current_device())
    np.testing.assert_array_equal(view.cpu().numpy(), np.arange(12).reshape(3, 4))
    view.mul_(2.0)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.to_numpy(), 2.0 * np.arange(12).reshape(3, 4))
    tail = buffer_view(t.storage, (4,), offset=8)
    np.testing.assert_array_equal(tail.cpu().numpy(), [16.0, 18.0, 20.0, 22.0])

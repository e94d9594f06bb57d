"""sopt.kernel: kernels are declared objects, loaded lazily once per device, launched with counted dispatches."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt import kernel


def test_a_declared_function_loads_at_its_first_launch_once_and_counts_its_dispatches() -> None:
    fill = kernel.Function("tape", "tape_fill")
    assert fill._node is None   # declared: nothing loaded
    t = spy.Tensor.zeros(sopt.get_device(), (5,), "float")
    before = sopt.device.dispatch_count()
    kernel.launch(fill, None, i=spy.grid((5,)), value=2.5, dst=t)
    kernel.launch(kernel.Function("tape", "tape_fill"), None, i=spy.grid((5,)), value=-1.0, dst=t)   # an equal one
    assert sopt.device.dispatch_count() - before == 2
    assert fill.load() is kernel.Function("tape", "tape_fill").load()   # one node per process
    np.testing.assert_array_equal(t.to_numpy(), np.full(5, -1.0, np.float32))


def test_sopt_kernels_refuse_positional_arguments_and_a_user_file_keeps_them(tmp_path) -> None:
    t = spy.Tensor.zeros(sopt.get_device(), (3,), "float")
    before = sopt.device.dispatch_count()
    problem_file = pathlib.Path(sopt.__file__).parent / "problems" / "fitting" / "scaled_parameter.slang"
    for fill in (kernel.Function("tape", "tape_fill"),   # slang_lib
                 kernel.Function(sopt.device.slang_lib_path() / "tape.slang", "tape_fill"),   # the same file by path
                 kernel.Function(problem_file, "scaled_pull_gradient")):   # a problem's own kernel
        refused = re.escape(fill.label) + r": .*by the Slang parameter's name.*got 3 positional"
        with pytest.raises(TypeError, match=refused):
            kernel.launch(fill, None, spy.grid((3,)), 4.0, t)
        with pytest.raises(TypeError, match="got 1 positional"):   # one positional among named ones
            kernel.launch(fill, None, spy.grid((3,)), value=4.0, dst=t)
    assert sopt.device.dispatch_count() == before   # refused before anything was counted or recorded
    user_file = tmp_path / "user_fill.slang"
    user_file.write_text("import slangpy;\n"
                         "void user_fill(int i, float value, RWTensor<float, 1> dst) { dst[i] = value; }\n")
    kernel.launch(kernel.Function(user_file, "user_fill"), None, spy.grid((3,)), 4.0, t)   # SlangPy's positional call
    np.testing.assert_array_equal(t.to_numpy(), np.full(3, 4.0, np.float32))


def test_generic_arguments_name_the_specialisation_and_equal_declarations_are_one_kernel() -> None:
    f = kernel.Function("nn/linear", "linear_forward").specialise("2,64", "ReLU")
    assert f.specialisation == "linear_forward<2,64,ReLU>" and f.label == "nn/linear.slang:linear_forward<2,64,ReLU>"
    assert f == kernel.Function("nn/linear", "linear_forward", "2,64", "ReLU") and f != f.backward
    k = kernel.Kernel("optim/sgd", "sgd_step")
    assert k == kernel.Kernel("optim/sgd", "sgd_step") and k.load() is kernel.Kernel("optim/sgd", "sgd_step").load()
    assert sopt.optim.SGD.kernels["update"] == k and sopt.optim.SGD.kernels["update_unchecked"].entry == "sgd_step_unchecked"


def test_a_generic_entry_point_is_specialised_by_value_and_type_arguments() -> None:
    # the fused MLP's reduce pass is plain; its forward is generic over sizes and activation types
    forward = kernel.Kernel("nn/fully_fused_mlp", "ffmlp_forward_kernel").specialise(
        1, 0, 4, 4, 1, 4, 1, "HiddenAct<ReLU>", "OutputAct<Identity>", 0, 1, 1)
    program = forward.load().program
    assert list(program.layout.entry_points[0].compute_thread_group_size) == [128, 1, 1]


def test_prefetch_loads_the_sources_declared_while_it_runs() -> None:
    thread = kernel.prefetch_declared(idle_seconds=0.5)
    late = kernel.Function("nn/identity", "identity_forward")   # declared after the thread started
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert (id(sopt.get_device()), late.source.key) in kernel._modules

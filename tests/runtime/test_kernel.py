"""sopt.runtime.kernel: kernels are declared objects, loaded lazily once per device, launched with counted dispatches."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import kernel


def test_a_declared_function_loads_at_its_first_launch_once_and_counts_its_dispatches() -> None:
    fill = kernel.Function("tape", "tape_fill")
    assert fill._node is None   # declared: nothing loaded
    t = spy.Tensor.zeros(sopt.get_device(), (5,), "float")
    before = sopt.runtime.device.dispatch_count()
    kernel.launch(fill, None, i=spy.grid((5,)), value=2.5, dst=t)
    kernel.launch(kernel.Function("tape", "tape_fill"), None, i=spy.grid((5,)), value=-1.0, dst=t)   # an equal one
    assert sopt.runtime.device.dispatch_count() - before == 2
    assert fill.load() is kernel.Function("tape", "tape_fill").load()   # one node per process
    np.testing.assert_array_equal(t.to_numpy(), np.full(5, -1.0, np.float32))


def test_sopt_kernels_refuse_positional_arguments_and_a_user_file_keeps_them(tmp_path) -> None:
    t = spy.Tensor.zeros(sopt.get_device(), (3,), "float")
    before = sopt.runtime.device.dispatch_count()
    problem_file = pathlib.Path(sopt.__file__).parent / "problems" / "fitting" / "scaled_parameter.slang"
    for fill in (kernel.Function("tape", "tape_fill"),   # slang_lib
                 kernel.Function(sopt.runtime.device.slang_lib_path() / "tape.slang", "tape_fill"),   # the same file by path
                 kernel.Function(problem_file, "scaled_pull_gradient")):   # a problem's own kernel
        refused = re.escape(fill.label) + r": .*by the Slang parameter's name.*got 3 positional"
        with pytest.raises(TypeError, match=refused):
            kernel.launch(fill, None, spy.grid((3,)), 4.0, t)
        with pytest.raises(TypeError, match="got 1 positional"):   # one positional among named ones
            kernel.launch(fill, None, spy.grid((3,)), value=4.0, dst=t)
    assert sopt.runtime.device.dispatch_count() == before   # refused before anything was counted or recorded
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


def test_a_first_launch_has_the_driver_compile_its_pipeline_inside_the_compile_before_the_real_dispatch(
        tmp_path, monkeypatch) -> None:
    """A kernel's first use hands its pipeline to FirstUse.run inside sopt.runtime.device.compiling (the driver's compile is
    part of the compile's time), before the kernel's own dispatch is recorded; the results are unchanged. A
    Function's pipeline is the one SlangPy then launches with (built once: nothing compiles at the launch)."""
    ran: list[tuple[object, int]] = []
    real_run = sopt.runtime.device.FirstUse.run

    def recording_run(self, pipeline) -> None:
        ran.append((pipeline, sopt.runtime.device.dispatch_count()))
        real_run(self, pipeline)

    monkeypatch.setattr(sopt.runtime.device.FirstUse, "run", recording_run)
    source = tmp_path / "first_use.slang"
    source.write_text("import slangpy;\n"
                      "void twice(int i, float value, RWTensor<float, 1> dst) { dst[i] = 2.0 * value; }\n"
                      "RWStructuredBuffer<float> out;\n"
                      "[shader(\"compute\")] [numthreads(32, 1, 1)]\n"
                      "void thrice(uint3 tid: SV_DispatchThreadID) { if (tid.x < 4) out[tid.x] = 3.0 * tid.x; }\n")
    device = sopt.get_device()
    t = spy.Tensor.zeros(device, (4,), "float")
    encoder = sopt.runtime.device.create_command_encoder()
    twice = kernel.Function(source, "twice")
    kernel.launch(twice, encoder, i=spy.grid((4,)), value=1.5, dst=t)
    kernel.launch(twice, encoder, i=spy.grid((4,)), value=1.5, dst=t)   # not a first use: nothing more
    sopt.runtime.device.submit(encoder)
    np.testing.assert_array_equal(t.to_numpy(), np.full(4, 3.0, np.float32))
    if sopt.runtime.device.device_kind() == "vulkan":
        assert len(ran) == 1
        built = twice.load().debug_build_call_data(i=spy.grid((4,)), value=1.5, dst=t)
        assert ran[0][0] is built.pipeline
    else:   # CUDA compiles the pipeline SlangPy creates at the launch; nothing to run first
        assert ran == []
    ran.clear()
    thrice = kernel.Kernel(source, "thrice")
    loaded = thrice.load()
    assert len(ran) == 1 and ran[0][0] is loaded.pipeline   # created inside the compile, on every backend
    buffer = device.create_buffer(size=16, struct_size=4, usage=spy.BufferUsage.unordered_access
                                  | spy.BufferUsage.shader_resource, data=np.zeros(4, np.float32))
    thrice.bind(out=buffer).dispatch(32)
    np.testing.assert_array_equal(buffer.to_numpy().view(np.float32), [0.0, 3.0, 6.0, 9.0])

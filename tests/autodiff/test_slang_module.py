"""load_module's calls: the result's shape comes from SlangPy's binding of the arguments (no kernel of its own), so a
call's first launch builds one kernel, and a new argument signature (more dimensions) binds again."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from slangpy.core.calldata import CallData

import sopt

SOURCE = """
import slangpy;
[Differentiable]
float2 polar(float radius, float degrees)
{
    float a = degrees * (3.14159265358979 / 180.0);
    return radius * float2(cos(a), sin(a));
}
"""


def test_a_call_builds_one_kernel_and_its_result_has_the_call_shape(tmp_path: pathlib.Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "polar.slang"
    path.write_text(SOURCE)
    module = sopt.load_module(path)
    built: list[str] = []
    build = CallData._try_build_shader

    def counted(self: CallData, *args: object, **kwargs: object) -> None:
        built.append(self.debug_name)
        build(self, *args, **kwargs)

    monkeypatch.setattr(CallData, "_try_build_shader", counted)
    radius = sopt.Parameter(np.float32([1.0, 2.0, 3.0]))
    degrees = np.float32([0.0, 90.0, 180.0])
    for call in range(2):
        tape = sopt.Tape()
        with tape:
            xy = module.polar(radius=radius, degrees=degrees)
        tape.submit()
        assert tuple(xy.shape) == (3, 2)
        np.testing.assert_allclose(xy.to_numpy(), [[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]], atol=1e-6)
        assert len(built) == 1, (call, built)   # the launch's kernel only, and only at the first call
    # two call dimensions: bound anew, the result (2, 3, 2)
    out = module.polar(radius=np.ones((2, 3), np.float32), degrees=np.zeros((2, 3), np.float32))
    assert tuple(out.shape) == (2, 3, 2) and len(built) == 2
    np.testing.assert_allclose(out.to_numpy()[..., 0], 1.0)

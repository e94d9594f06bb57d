"""benchmarks/neural_field.py's issue-21 table: PyTorch's twins of sopt's networks compute sopt's function (hash grid
with dense and hashed levels in 2D and 3D, the frequency encoding's layout, whole networks started from sopt's initial
arrays), tiny-cuda-nn's RESULT lines parse as bench.cu prints them, and the table's ratios."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
import slangpy as spy

from benchmarks import neural_field as nf
from benchmarks.tcnn import runner
from sopt.runtime.device import get_device
from sopt.nn import FrequencyEncoding, HashGridEncoding

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the twins need it")

BENCH_CU = pathlib.Path(runner.__file__).parent / "bench.cu"


def sopt_forward(model, x: np.ndarray) -> np.ndarray:
    return model.forward(spy.Tensor.from_numpy(get_device(), np.ascontiguousarray(x, np.float32))).to_numpy().copy()


@pytest.mark.parametrize("dims", [2, 3])
def test_torch_hashgrid_matches_sopt(dims: int) -> None:
    enc = HashGridEncoding(dims, n_levels=4, n_features=2, log2_table_size=8, base_resolution=4, per_level_scale=2.0)
    hashed = [lv.hashed for lv in enc.levels]
    assert any(hashed) and not all(hashed), hashed   # both index kinds are compared
    rng = np.random.default_rng(dims)
    table = rng.normal(size=enc.table.shape).astype(np.float32)   # O(1) entries: a wrong row shows
    enc.load_state_dict({"table": table})
    x = rng.random((512, dims), dtype=np.float32)
    want = sopt_forward(enc, x)
    got = nf.torch_hashgrid_encode(torch, torch.from_numpy(x), torch.from_numpy(table), enc.levels).numpy()
    assert got.shape == want.shape == (512, 8)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)


def test_torch_frequency_encoding_matches_sopt_3d() -> None:
    x = np.random.default_rng(0).random((256, 3), dtype=np.float32)
    want = sopt_forward(FrequencyEncoding(3, nf.ISSUE21_N_FREQS), x)
    # float64 in torch: sin(2^11 pi x) in float32 would be off by ~5e-4 (sopt reduces the argument exactly)
    got = nf.torch_encode(torch, torch.from_numpy(x.astype(np.float64)), nf.ISSUE21_N_FREQS).numpy()
    assert got.shape == want.shape == (256, 72)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("network, dims", [("frequency", 2), ("hashgrid", 3)])
def test_torch_twin_computes_the_sopt_network(network: str, dims: int) -> None:
    field = nf.sopt_field_network(network, dims, seed=3)
    assert field.label == "sopt"
    if network == "hashgrid":   # an O(1) table instead of the initial U(-1e-4, 1e-4): every row read shows
        field.table = np.random.default_rng(2).normal(size=field.table.shape).astype(np.float32)
        field.model[0].load_state_dict({"table": field.table})
    x = np.random.default_rng(1).random((256, dims), dtype=np.float32)
    want = sopt_forward(field.model, x)
    module, forward = nf.torch_field_network(torch, network, dims, field)
    module.cpu()
    if network == "frequency":
        module.double()   # see test_torch_frequency_encoding_matches_sopt_3d
        got = forward(torch.from_numpy(x.astype(np.float64)))
    else:
        got = forward(torch.from_numpy(x))
    got = got.detach().numpy()
    assert got.shape == want.shape == (256, 3)
    assert want.std(axis=0).min() > 0.02   # the outputs vary with x: the encodings are compared, not just biases
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max() + 1e-6)


def test_sopt_frequency_3d_falls_back_to_mlp_layers() -> None:
    # FullyFusedMLP takes at most 64 input features; 3 x 2 x 12 = 72 (until its kernels grow): the MLP layers then
    field = nf.sopt_field_network("frequency", 3)
    assert field.label in ("sopt", "sopt layers")
    assert field.layers[0][0].shape == (64, 72) and field.layers[-1][0].shape == (3, 64)


def test_parse_result_line_reads_what_bench_cu_prints() -> None:
    fmt = re.search(r'std::printf\("(RESULT [^"]*)\\n"', BENCH_CU.read_text()).group(1)
    values = ["hashgrid", 3, 262144, 0, "", 256, 0.9461, 0.94, 0.93, 0.99, 0.95, 277.1, 0.33, 0.081, 12345]
    line = fmt.replace("%zu", "%d").replace("%u", "%d") % tuple(values)
    row = runner.parse_result_line(line)
    assert row["model"] == "hashgrid" and row["dims"] == 3 and row["batch"] == 262144 and row["jit"] == 0
    assert row["steps"] == 256 and row["mean_ms"] == pytest.approx(0.9461) and row["n_params"] == 12345
    assert row["loss_last"] == pytest.approx(0.081) and row["jit_failed"] is False
    failed = runner.parse_result_line(fmt.replace("%zu", "%d").replace("%u", "%d") % tuple(
        values[:3] + [0, "(jit_failed)"] + values[5:]))
    assert failed["jit"] == 1 and failed["jit_failed"] is True
    assert runner.parse_result_line("INFO device=H100") is None
    with pytest.raises(ValueError, match="mean_ms"):
        runner.parse_result_line("RESULT model=hashgrid dims=2 batch=16384 jit=0 steps=10")
    with pytest.raises(ValueError, match="key=value"):
        runner.parse_result_line("RESULT model=hashgrid dims")


def test_issue21_table_ratios() -> None:
    rows = [{"framework": "sopt", "network": "hashgrid", "dims": 2, "batch": 1 << 14, "ms_per_step": 0.6, "psnr": 30.0,
             "trained_steps": 1020},
            {"framework": "pytorch eager", "network": "hashgrid", "dims": 2, "batch": 1 << 14, "ms_per_step": 3.0,
             "psnr": 29.5, "trained_steps": 400},
            {"framework": "sopt layers", "network": "frequency", "dims": 3, "batch": 1 << 18, "ms_per_step": 4.0,
             "psnr": 20.0, "trained_steps": 276}]
    tcnn = [{"model": "hashgrid", "dims": 2, "batch": 1 << 14, "jit": 0, "jit_failed": False, "mean_ms": 0.2},
            {"model": "hashgrid", "dims": 2, "batch": 1 << 14, "jit": 1, "jit_failed": False, "mean_ms": 0.15},
            {"model": "frequency", "dims": 3, "batch": 1 << 18, "jit": 0, "jit_failed": False, "mean_ms": 0.5},
            {"model": "frequency", "dims": 3, "batch": 1 << 18, "jit": 1, "jit_failed": True, "mean_ms": 0.5}]
    hash2, freq3 = nf.issue21_table(rows, tcnn)
    assert (hash2["tcnn"], hash2["tcnn_jit"], hash2["sopt"], hash2["torch"]) == (0.2, 0.15, 0.6, 3.0)
    assert hash2["sopt_vs_tcnn"] == pytest.approx(3.0) and hash2["sopt_vs_tcnn_jit"] == pytest.approx(4.0)
    assert hash2["torch_vs_sopt"] == pytest.approx(5.0)
    assert freq3["tcnn_jit"] is None and freq3["sopt_vs_tcnn_jit"] is None and freq3["torch_vs_sopt"] is None
    assert freq3["sopt_vs_tcnn"] == pytest.approx(8.0)
    text = nf.format_issue21_table([hash2, freq3])
    assert ("| hashgrid | 2D | 2^14 | 0.200 | 0.150 | 0.600 | 3.000 | 3.00x | 4.00x | 5.00x | 30.00 | 29.50 | "
            "1020/400 |") in text
    assert ("| frequency (sopt: MLP layers) | 3D | 2^18 | 0.500 | - | 4.000 | - | 8.00x | - | - | 20.00 | - | "
            "276 |") in text


def test_issue21_steps_and_cube_target() -> None:
    assert [nf.issue21_steps(1 << k) for k in (10, 14, 18, 20, 22)] == [1000, 1000, 256, 100, 100]
    p = np.random.default_rng(0).random((4096, 3))
    y = nf.cube_target(p)
    assert y.shape == (4096, 3) and y.dtype == np.float32 and y.min() >= 0 and y.max() <= 1
    assert y.std(axis=0).min() > 0.1   # every channel varies across the cube
    # periodic with period 1 along each axis (integer wave vectors): smooth, no seam for a field to fit
    np.testing.assert_allclose(nf.cube_target(p + np.array([1.0, 0.0, 0.0])), y, atol=1e-5)


def test_check_kit_needs_tcnn_sources_and_3d_grids(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="no tiny-cuda-nn/CMakeLists.txt"):
        runner.check_kit(tmp_path, [2])
    grid_h = tmp_path / "tiny-cuda-nn" / "include" / "tiny-cuda-nn" / "encodings" / "grid.h"
    grid_h.parent.mkdir(parents=True)
    (tmp_path / "tiny-cuda-nn" / "CMakeLists.txt").write_text("project(tiny-cuda-nn)\n")
    grid_h.write_text("#ifndef TCNN_KIT_MINIMAL // tcnn-bench kit: fewer instantiations -> shorter build\n")
    assert runner.check_kit(tmp_path, [2]) == tmp_path.resolve()   # the shared kit: 2D grids only
    with pytest.raises(ValueError, match="2D hash grids only"):
        runner.check_kit(tmp_path, [2, 3])
    # the marker is the line benchmarks/tcnn/tcnn-kit.patch adds
    patch = (pathlib.Path(runner.__file__).parent / "tcnn-kit.patch").read_text()
    added = [line[1:] for line in patch.splitlines() if line.startswith("+") and runner.GRID_3D_MARKER in line]
    assert len(added) == 1
    grid_h.write_text(added[0] + "\n")
    assert runner.check_kit(tmp_path, [2, 3]) == tmp_path.resolve()


def test_issue21_table_fp16_rows_share_the_networks_tcnn_and_pytorch_columns() -> None:
    assert nf.network_label("hashgrid", "fp32") == "hashgrid" and nf.network_label("hashgrid", "fp16") == \
        "hashgrid-fp16"
    assert nf.base_network("hashgrid-fp16") == nf.base_network("hashgrid") == "hashgrid"
    batch = 1 << 14
    rows = [{"framework": "sopt", "network": "hashgrid", "dims": 2, "batch": batch, "ms_per_step": 0.6, "psnr": 30.0},
            {"framework": "sopt fp16", "network": "hashgrid-fp16", "dims": 2, "batch": batch, "ms_per_step": 0.4,
             "psnr": 29.9},
            {"framework": "pytorch eager", "network": "hashgrid", "dims": 2, "batch": batch, "ms_per_step": 3.0,
             "psnr": 29.5}]
    tcnn = [{"model": "hashgrid", "dims": 2, "batch": batch, "jit": 0, "jit_failed": False, "mean_ms": 0.2}]
    fp32, fp16 = nf.issue21_table(rows, tcnn)
    assert (fp32["network"], fp32["sopt"], fp32["tcnn"], fp32["torch"]) == ("hashgrid", 0.6, 0.2, 3.0)
    assert (fp16["network"], fp16["sopt"], fp16["tcnn"], fp16["torch"]) == ("hashgrid-fp16", 0.4, 0.2, 3.0)
    assert fp16["sopt_vs_tcnn"] == pytest.approx(2.0) and fp16["torch_vs_sopt"] == pytest.approx(7.5)
    assert "| hashgrid-fp16 | 2D | 2^14 | 0.200 | - | 0.400 | 3.000 | 2.00x | - | 7.50x | 29.90 | 29.50 |" in \
        nf.format_issue21_table([fp32, fp16])


@pytest.mark.skipif(get_device().info.type != spy.DeviceType.cuda, reason="TensorCoreMLP runs on CUDA only")
def test_fp16_network_is_a_tensor_core_mlp_with_the_fp32_weights() -> None:
    for network, dims in (("frequency", 2), ("frequency", 3), ("hashgrid", 3)):
        fp32, fp16 = (nf.sopt_field_network(network, dims, seed=3, mlp=mlp) for mlp in ("fp32", "fp16"))
        net = fp16.model if network == "frequency" else fp16.model[1]   # frequency: fused into it
        assert fp16.label == "sopt fp16" and type(net).__name__ == "TensorCoreMLP"
        assert net.layers[0][1] == (2 * 12 * dims if network == "frequency" else 32)   # layer 0's inputs
        for (w32, b32), (w16, b16) in zip(fp32.layers, fp16.layers, strict=True):
            np.testing.assert_array_equal(w32, w16)
            np.testing.assert_array_equal(b32, b16)


def test_step_time_is_the_median_round_so_one_slow_round_does_not_count() -> None:
    # 5 probe steps, then 5 rounds of 2 steps; the second round (the 8th and 9th calls) is slowed to 50 ms a step, as a
    # burst of host interference would: the mean of all rounds would read >= 10 ms, the median round ~0
    import time

    calls = []

    def step() -> None:
        calls.append(1)
        if len(calls) in (8, 9):
            time.sleep(0.05)

    per_step, timed = nf.time_steps_budget(step, lambda: None, steps=10, warmup=0, max_seconds=100.0, rounds=5)
    assert timed == 10 and len(calls) == 15
    assert per_step < 0.005

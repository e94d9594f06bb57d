import os
import subprocess
import sys
import pathlib

import sopt
from sopt import device

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_device_is_cuda_or_vulkan_and_honours_sopt_device():
    kind = device.device_kind()
    assert kind in ("cuda", "vulkan")
    if os.environ.get("SOPT_DEVICE"):
        assert kind == os.environ["SOPT_DEVICE"]


def test_unknown_backend_and_missing_driver_give_one_clear_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), "SOPT_DEVICE": "metal"}
    r = subprocess.run([sys.executable, "-c", "import sopt; sopt.get_device()"], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "SOPT_DEVICE='metal' is not supported: allowed are 'cuda', 'vulkan'" in r.stderr
    # no Vulkan driver: point the loader at an empty ICD list; CUDA is forced, then Vulkan is tried alone
    env.update(SOPT_DEVICE="vulkan", VK_ICD_FILENAMES=str(tmp_path / "none.json"), VK_DRIVER_FILES=str(tmp_path / "none.json"))
    code = "import sopt\ntry:\n    sopt.get_device()\nexcept sopt.device.DeviceUnavailableError as e:\n    print('ERR', e)\n"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "ERR sopt found no GPU backend. Tried:" in r.stdout and "vulkan:" in r.stdout
    assert "mesa-vulkan-drivers" in r.stdout and "Traceback" not in r.stdout + r.stderr


def test_shader_cache_lives_in_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SOPT_CACHE_DIR", str(tmp_path))
    assert device.cache_dir() == tmp_path
    assert (device.cache_dir() / device.device_kind()).parent == tmp_path
    assert device.slang_lib_path().joinpath("optim", "adam.slang").is_file()


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, cwd=REPO)


_LINEAR = ("import numpy as np, sopt\nfrom sopt.nn import Linear\n"
           "y = Linear(3, 5, activation='relu').forward(sopt.Parameter(np.ones((4, 3))).values)\n"
           "print('y', y.to_numpy().shape)\n")


def test_command_line_reports_unknown_backend_in_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "sopt.problems.neural_field_image", "steps=1", "--no-progress"],
                       env={**os.environ, "SOPT_DEVICE": "metal"}, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("error: SOPT_DEVICE='metal' is not supported: allowed are 'cuda', 'vulkan', or unset "
                                "to pick CUDA where it works, else Vulkan")


def test_first_compile_is_announced_and_cached_runs_are_quiet(tmp_path) -> None:
    first = _run(_LINEAR, SOPT_CACHE_DIR=str(tmp_path))
    assert first.returncode == 0 and "y (4, 5)" in first.stdout, first.stderr
    assert "sopt: compiling kernels for nn/linear.slang:linear_forward<3,5,ReLU>" in first.stderr
    assert f"cached in {tmp_path}" in first.stderr
    second = _run(_LINEAR, SOPT_CACHE_DIR=str(tmp_path))
    assert second.returncode == 0 and "y (4, 5)" in second.stdout
    assert "compiling" not in second.stderr


def test_unwritable_cache_folder_warns_once_and_runs_without_disk_cache(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    r = _run(_LINEAR, SOPT_CACHE_DIR=str(blocker / "cache"))
    assert r.returncode == 0 and "y (4, 5)" in r.stdout, r.stderr
    assert r.stderr.count("is not writable") == 1 and "SOPT_CACHE_DIR" in r.stderr
    assert str(blocker / "cache") in r.stderr and "no GPU backend" not in r.stderr
    assert "(no disk cache)" in r.stderr
    assert blocker.read_text() == "not a folder"


def test_mps_share_of_multiprocessors() -> None:
    """A CUDA MPS client limited to a share of the threads gets that share of the multiprocessors for its grid
    barriers (rounded down, at least one); an unset or meaningless percentage changes nothing."""
    assert device.mps_share(132, None) == 132
    assert device.mps_share(132, "50") == 66
    assert device.mps_share(132, "33.3") == 43
    assert device.mps_share(132, "0.1") == 1
    for bad in ("", "abc", "0", "-5", "150"):
        assert device.mps_share(132, bad) == 132


def test_cuda_memory_total_asks_the_driver_once_per_process(monkeypatch) -> None:
    """sopt run checks its config several times before the device opens; the driver is asked only the first time,
    and an answer of None (no CUDA driver) is remembered too."""
    try:
        for answer in (80 * 2 ** 30, None):
            asked = []
            monkeypatch.setattr(device, "_fewest_over_devices",
                                lambda query, answer=answer: asked.append(query) or answer)
            device.cuda_memory_total.cache_clear()
            assert [device.cuda_memory_total() for _ in range(3)] == [answer] * 3
            assert len(asked) == 1
    finally:
        device.cuda_memory_total.cache_clear()   # the real driver's answer for the tests after this one


def test_bound_kernel_set_members_refuses_unknown_members_before_writing() -> None:
    import pytest
    from sopt.losses import MSELoss

    bound = MSELoss()._kernel          # regression.slang's kernel: a flat ``args`` struct, bound with every member
    bound.set(args={"count": 7, "pred_offset": 0, "target_offset": 0, "grad_offset": 0, "n_groups": 1, "slot": 0,
                    "inv_count": 1.0 / 7, "param": 0.0, "accumulate": 0})
    with pytest.raises(KeyError, match=r"args has no member\(s\) \['slott'\]"):
        bound.set_members("args", count=9, slott=1)
    assert bound._values["args"]["count"] == 7   # the known member given with it was not written either
    bound.set_members("args", count=9)
    assert bound._values["args"]["count"] == 9
    with pytest.raises(KeyError, match="nothing has no member"):
        bound.set_members("nothing", count=1)

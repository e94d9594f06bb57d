import os
import pathlib
import re
import subprocess
import sys

import sopt
from sopt.runtime import device

REPO = pathlib.Path(__file__).resolve().parents[2]


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
    code = "import sopt\ntry:\n    sopt.get_device()\nexcept sopt.runtime.device.DeviceUnavailableError as e:\n    print('ERR', e)\n"
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
    r = subprocess.run([sys.executable, "-m", "problems.neural_field_image", "steps=1", "--no-progress"],
                       env={**os.environ, "SOPT_DEVICE": "metal"}, capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("error: SOPT_DEVICE='metal' is not supported: allowed are 'cuda', 'vulkan', or unset "
                                "to pick CUDA where it works, else Vulkan")


def test_first_compile_is_announced_and_cached_runs_are_quiet(tmp_path) -> None:
    first = _run(_LINEAR, SOPT_CACHE_DIR=str(tmp_path))
    assert first.returncode == 0 and "y (4, 5)" in first.stdout, first.stderr
    # one line before the process's first compile, then one numbered line per kernel with its time (on Vulkan the
    # driver's compile at the pipeline's first run is part of it)
    assert first.stderr.startswith(f"sopt: compiling kernels on {device.device_kind()} at their first use (cached in "
                                   f"{tmp_path}"), first.stderr
    driver = r"the driver's \d+\.\d s of it; " if device.device_kind() == "vulkan" else ""
    assert re.search(r"^sopt: compile 1: nn/linear\.slang:linear_forward<3,5,ReLU> in (\d+\.\d) s \(" + driver
                     + r"\1 s compiling in this process\)$", first.stderr, re.M), first.stderr
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
    assert "at their first use (no disk cache; " in r.stderr
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


class _FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _FakeDevice:
    """Stands in for the SlangPy device in FirstUse.run: each wait() takes the next of ``waits`` seconds of the
    fake clock; what was recorded and submitted is kept."""

    def __init__(self, clock: _FakeClock, waits: list[float]) -> None:
        self.clock, self.waits, self.recorded, self.submitted = clock, list(waits), [], 0

    def wait(self) -> None:
        self.clock.now += self.waits.pop(0)

    def create_command_encoder(self) -> "_FakeDevice":
        return self

    def begin_compute_pass(self) -> "_FakeDevice":
        return self

    def bind_pipeline(self, pipeline) -> None:
        self.recorded.append(("bind", pipeline))

    def dispatch_compute_indirect(self, arguments) -> None:
        self.recorded.append(("indirect", arguments))

    def end(self) -> None:
        pass

    def finish(self) -> str:
        return "commands"

    def submit_command_buffer(self, commands) -> None:
        self.submitted += 1


def test_a_compile_notice_includes_the_drivers_compile_at_the_first_dispatch_not_earlier_work(
        tmp_path, monkeypatch, capsys) -> None:
    """A kernel's compile time is SlangPy's part plus the wait for its pipeline's first (empty) dispatch, where a
    Vulkan driver compiles; the wait for GPU work submitted before is left out; the notice says both, numbered."""
    clock = _FakeClock()
    fake = _FakeDevice(clock, [7.0, 5.0])   # 7 s finishing earlier work, then 5 s: the driver compiling
    monkeypatch.setattr(device.time, "perf_counter", clock)
    monkeypatch.setattr(device, "get_device", lambda: fake)
    monkeypatch.setattr(device, "device_kind", lambda: "vulkan")
    monkeypatch.setattr(device, "_no_groups", lambda dev: "no-groups")
    monkeypatch.setattr(device, "_disk_cache", tmp_path)
    monkeypatch.setattr(device, "_compiles", [("earlier.slang:k", 1.5)])
    monkeypatch.setattr(device, "_compile_seconds", 1.5)
    monkeypatch.setattr(device, "_announced", False)
    monkeypatch.setattr(device, "_compiled_here", set())
    with device.compiling("fake.slang:kernel") as first:
        clock.now += 0.25          # SlangPy's compile and the pipeline's creation
        first.run("pipeline")
    assert fake.recorded == [("bind", "pipeline"), ("indirect", "no-groups")] and fake.submitted == 1
    assert device.compiles()[-1] == ("fake.slang:kernel", 5.25)
    assert device.compile_seconds() == 6.75
    err = capsys.readouterr().err.splitlines()
    assert err == [f"sopt: compiling kernels on vulkan at their first use (cached in {tmp_path} afterwards; the "
                   "progress bar's rate and ETA leave compiling out); each is numbered and timed, the driver's "
                   "compile included ...",
                   "sopt: compile 2: fake.slang:kernel in 5.2 s (the driver's 5.0 s of it; 6.8 s compiling in this "
                   "process)"]
    # a second process with the same cache: the marker says compiled; its first use still counts, without a notice
    monkeypatch.setattr(device, "_compiled_here", set())
    fake.waits = [0.0, 0.5]
    with device.compiling("fake.slang:kernel") as first:
        first.run("pipeline")
    assert device.compiles()[-1] == ("fake.slang:kernel", 5.25) and device.compile_seconds() == 7.25
    assert capsys.readouterr().err == ""


def test_first_use_runs_nothing_on_cuda(monkeypatch) -> None:
    """CUDA compiles a pipeline when it is created: no extra dispatch, no wait."""
    monkeypatch.setattr(device, "device_kind", lambda: "cuda")
    monkeypatch.setattr(device, "get_device", lambda: (_ for _ in ()).throw(AssertionError("no device call")))
    first = device.FirstUse()
    first.run("pipeline")
    assert (first.waited, first.driver) == (0.0, 0.0)

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
    assert r.returncode != 0 and "SOPT_DEVICE='metal' is not a backend sopt supports" in r.stderr
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

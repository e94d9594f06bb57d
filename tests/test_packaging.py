"""`pip install .` gives a working package: the installed copy finds its Slang sources without the tree."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

CODE = """
import pathlib, numpy as np, sopt
here = pathlib.Path(sopt.__file__).resolve()
print("installed-at", here)
lib = sopt.runtime.device.slang_lib_path()
assert lib == here.parent / "slang_lib", lib
p = sopt.Parameter(np.ones(5)); opt = sopt.optim.Adam([p], lr=0.5); p.set_grad(np.ones(5)); opt.step()
assert np.allclose(p.numpy(), 0.5), p.numpy()
print("ok")
"""


def test_installed_package_runs_from_another_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # PYTHONPATH may carry a site folder (e.g. on the GPU machine); keep entries outside the repository
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and pathlib.Path(p).resolve() != REPO]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    where = subprocess.run([sys.executable, "-c", "import sopt; print(sopt.__file__)"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    if where.returncode != 0:
        pytest.skip("sopt is not pip-installed in this environment (run `pip install .` to check packaging)")
    installed = pathlib.Path(where.stdout.strip()).resolve()
    if REPO in installed.parents:
        pytest.skip("sopt is installed in editable mode; this test checks a regular install")
    r = subprocess.run([sys.executable, "-c", CODE], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")


def test_installed_sopt_command_runs_a_problem_from_another_folder(tmp_path):
    """The problems (with their own .slang files) are in the wheel: `python -m sopt run` works outside the tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and pathlib.Path(p).resolve() != REPO]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    where = subprocess.run([sys.executable, "-c", "import problems; print(problems.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    if where.returncode != 0:
        pytest.skip("sopt (with its problems) is not pip-installed here (run `pip install .` to check packaging)")
    if REPO in pathlib.Path(where.stdout.strip()).resolve().parents:
        pytest.skip("sopt is installed in editable mode; this test checks a regular install")
    r = subprocess.run([sys.executable, "-m", "sopt", "run", "--problem", "fit_projectile", "steps=3", "multi_start=1",
                        "log_every=1", "--out", "run", "--no-progress"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "finished 3 steps" in r.stdout, r.stdout
    for name in ("config.toml", "summary.json", "result.json", "trajectories.png"):
        assert (tmp_path / "run" / name).is_file(), name


# The import names of sopt's dependencies, required and optional (pyproject.toml's names -> what they install)
IMPORT_NAMES = {"slangpy": "slangpy", "numpy": "numpy", "tqdm": "tqdm", "pillow": "PIL", "pydantic": "pydantic",
                "matplotlib": "matplotlib", "tomli-w": "tomli_w", "pytest": "pytest", "trimesh": "trimesh",
                "scikit-image": "skimage", "scipy": "scipy", "tensorboardx": "tensorboardX", "ray": "ray",
                "torch": "torch", "imageio": "imageio", "imageio-ffmpeg": "imageio_ffmpeg"}


def _dependency_names() -> set[str]:
    import re
    import tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    return {re.match(r"[A-Za-z0-9_.-]+", s).group(0).lower() for s in specs}


def test_every_dependency_has_its_import_name_listed():
    missing = _dependency_names() - set(IMPORT_NAMES)
    assert not missing, f"add the import names of {sorted(missing)} to IMPORT_NAMES"


def test_no_folder_under_tests_is_named_like_a_module_it_could_shadow():
    # pytest puts test folders on sys.path: a folder tests/torch becomes a namespace package named torch where
    # torch is not installed, and importorskip("torch") then passes
    taken = set(IMPORT_NAMES.values()) | set(sys.stdlib_module_names) | {"sopt"}
    folders = [p for p in (REPO / "tests").rglob("*") if p.is_dir() and p.name != "__pycache__"]
    clashes = sorted(str(p.relative_to(REPO)) for p in folders if p.name in taken)
    assert folders and not clashes, clashes

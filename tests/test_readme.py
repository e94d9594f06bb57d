"""The README's runnable Python (blocks after a ``<!-- runnable`` comment) runs as printed and fits what it says."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
MARK = "<!-- runnable"


def runnable_blocks(text: str) -> list[str]:
    """The ```python blocks that directly follow a line starting with MARK, in order."""
    return re.findall(r"^" + re.escape(MARK) + r".*?-->\n```python\n(.*?)^```$", text, flags=re.M | re.S)


def run_block(code: str, folder: pathlib.Path) -> str:
    """``code``'s stdout, run as a script in ``folder`` with this checkout's sopt first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_runnable_blocks_are_complete() -> None:
    """At least the tour is marked, and no runnable block leaves a step out with a bare ``...``."""
    blocks = runnable_blocks((REPO / "README.md").read_text())
    assert blocks, f"README.md has no python block after a {MARK} comment"
    for code in blocks:
        compile(code, "README.md", "exec")
        assert not re.search(r"^\s*\.\.\.\s*(#.*)?$", code, flags=re.M), code


def test_the_tour_runs_and_recovers_its_parameters(tmp_path: pathlib.Path) -> None:
    """The tour fits a = 1.5, b = 0.8 from noisy samples, prints the loss as a number, and saves a checkpoint."""
    tour = runnable_blocks((REPO / "README.md").read_text())[0]
    out = run_block(tour, tmp_path)
    fitted = re.search(r"^a, b = \[\s*([-\d.]+)\s+([-\d.]+)\s*\] final LossValue\(([-\d.e]+), MSELoss\)$", out, re.M)
    assert fitted, out
    a, b, loss = map(float, fitted.groups())
    assert abs(a - 1.5) < 0.03 and abs(b - 0.8) < 0.01, out
    assert 0.0015 < loss < 0.0035, out          # the noise variance is 0.0025
    assert re.search(r"^step 0: loss \d+\.\d{5}$", out, re.M), out   # f"{loss:.5f}" formats the float
    assert (tmp_path / "wave.ckpt").is_file()


def test_the_simulator_fit_runs_and_recovers_the_stiffness(tmp_path: pathlib.Path) -> None:
    """"A simulator fit on the tape" defines every name it uses (observed_x was never defined before) and fits the
    cloth's stiffness from 80 N/m to the true 120 N/m, ending at a loss near the 1 mm noise's variance."""
    block = [b for b in runnable_blocks((REPO / "README.md").read_text()) if "SpringSystem" in b]
    assert len(block) == 1, "README.md: the simulator fit is not (or not once) marked runnable"
    out = run_block(block[0], tmp_path)
    fitted = re.search(r"^k = ([-\d.]+) N/m \(true 120\), loss ([-\d.e+]+)$", out, re.M)
    assert fitted, out
    k, loss = map(float, fitted.groups())
    assert abs(k - 120.0) < 1.2, out              # 1%; the noise moves it by about 0.1 N/m
    assert 5e-7 < loss < 2e-6, out                # the noise variance is 1e-6 m^2

def test_an_installed_copy_records_the_commit_it_was_built_from(tmp_path: pathlib.Path) -> None:
    """env.json's git_commit (README: run directories record the git commit) is filled in for `pip install .` too:
    the build hook writes the checkout's commit into the wheel's sopt/_build_info.py; run from the checkout, git is
    asked. Before, an installed copy (no .git beside it) always recorded null."""
    head = [subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()]
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--target", str(tmp_path / "site"), str(REPO)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    head.append(subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    code = ("import sopt; from sopt.experiments.run_dir import environment; "
            "print(sopt.__file__); print(environment()['git_commit'])")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    where, commit = out.stdout.split()
    assert pathlib.Path(where).is_relative_to(tmp_path / "site"), where   # the installed copy, not the checkout
    assert commit.removesuffix("+dirty") in head, (commit, head)
    from sopt.experiments.run_dir import environment
    assert environment()["git_commit"].removesuffix("+dirty") in head   # this checkout: asked of git


def experiments_block() -> list[str]:
    """The command lines of the ```bash block under "Experiments from config files", comments and blank lines
    left out, in order."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Experiments from config files"):]
    block = re.search(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S).group(1)
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_experiments_block_reads_only_what_its_earlier_lines_made() -> None:
    """Copied line by line into an empty folder, each line finds what it needs: every config file a line runs was
    written by an earlier `sopt config ... > FILE`, every `sopt resume DIR` names an earlier `--out DIR`, and
    `sopt report DIR` a folder earlier runs write into."""
    made: set[str] = set()
    problem_of: dict[str, str] = {}   # a config file written by `sopt config PROBLEM > FILE` -> PROBLEM
    lines = experiments_block()
    assert len(lines) >= 10 and lines[0] == "sopt problems", lines
    for line in lines:
        command, _, written = line.partition(">")
        words = shlex.split(command)
        if words[1] in ("run", "sweep") and not words[2].startswith("--"):
            assert words[2] in made, f"{line!r} runs {words[2]}, which no earlier line writes"
            made.add(f"runs/{problem_of[words[2]]}")   # the runs' default folder: runs/<problem>/...
        if words[1] in ("resume", "report"):
            assert words[2] in made, f"{line!r} reads {words[2]}, which no earlier line makes"
        if written:
            made.add(written.split()[0])
            problem_of[written.split()[0]] = words[2]
        if "--out" in words:
            made.add(words[words.index("--out") + 1])
    assert "runs/cloth-ps" in made and "runs/fit_projectile" in made, made


def test_the_experiments_block_runs_line_by_line_up_to_its_resume(tmp_path: pathlib.Path) -> None:
    """The block's lines as written, in order, in an empty folder, up to and including `sopt resume runs/cloth-ps`:
    each exits 0. The run it resumes has finished, so `sopt resume` says so in one line and exits 0 (before, it was
    `error: ... has finished (150 steps); nothing to resume` and status 2). The sweeps after it (minutes of trials,
    Ray) are left to tests/experiments/test_sweep_*.py."""
    lines = experiments_block()
    resume = next(i for i, line in enumerate(lines) if line.startswith("sopt resume "))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    outputs = []
    for line in lines[:resume + 1]:
        r = subprocess.run(["bash", "-c", line.replace("sopt ", f"{shlex.quote(sys.executable)} -m sopt ", 1)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (line, r.stderr[-3000:])
        outputs.append(r.stdout)
    assert "sopt config neural_field_image encoding.otype=HashGrid" in lines
    hashgrid = outputs[lines.index("sopt config neural_field_image encoding.otype=HashGrid")]
    assert 'otype = "HashGrid"' in hashgrid and "\nlog2_hashmap_size = 19\n" in hashgrid
    assert (tmp_path / "fit.toml").read_text().startswith("# fit_projectile: ")
    assert json.loads((tmp_path / "runs" / "cloth-ps" / "summary.json").read_text())["status"] == "finished"
    assert outputs[resume] == "the run in 'runs/cloth-ps' has already finished (150 steps); nothing to resume\n"

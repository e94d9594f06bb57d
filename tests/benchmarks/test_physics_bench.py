"""benchmarks/physics.py: its ``--small`` run, where sopt and the PyTorch (CPU) and Warp (CPU, if installed)
implementations of the same integrators must give the same losses and gradients (they are written
independently, so a difference in the physics shows: a 1% change of the cloth's damping moves the gradient by
1.3e-3 relative, a 0.1% change of the heat step's dt by 2e-3), and the harness's reporting of failures."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from benchmarks import physics

AGREE = 1e-4   # max |g - g_sopt| / max |g_sopt|; measured 2e-7 .. 1e-6 at these sizes


def check_case_rows(rows: list[dict], case: str, other: str) -> None:
    """sopt's and ``other``'s rows of ``case`` ran, computed the same loss and gradients, and the gradients
    are not trivially zero."""
    by = {r["framework"]: r for r in rows if r["case"] == case}
    ref, row = by["sopt"], by[other]
    assert ref["status"] == "ok" and row["status"] == "ok", (ref, row)
    for name, scale in ref["grad_scale"].items():
        assert scale > 0, f"case {case}: sopt's gradient of {name} is zero: the comparison would prove nothing"
    assert set(row["grad_diff"]) == set(ref["grad_scale"])
    for name, diff in row["grad_diff"].items():
        assert diff < AGREE, f"case {case}: {other}'s gradient of {name} differs from sopt's by {diff:.3g}"
    assert abs(row["loss"] - ref["loss"]) <= 1e-5 * abs(ref["loss"]), (case, other, row["loss"], ref["loss"])
    assert row["ms"] > 0 and len(row["ms_samples"]) == 2


def test_small_run_sopt_and_torch_agree(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed: the comparison needs it")
    out = tmp_path / "physics.json"
    code = physics.main(["--small", "--cases", "A,D,E", "--frameworks", "sopt,torch", "--repeats", "2",
                         "--warmup", "0", "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["meta"]["args"]["small"] is True
    rows = data["rows"]
    assert sorted({(r["case"], r["framework"]) for r in rows}) == [
        (c, f) for c in ("A", "D", "E") for f in ("sopt", "torch")]
    for case in ("A", "D", "E"):
        check_case_rows(rows, case, "torch")
    # the projectiles bounced (restitution only acts at a contact), and sopt's memory figure counts its tape
    projectiles = next(r for r in rows if r["case"] == "D" and r["framework"] == "sopt")
    assert projectiles["grad_scale"]["restitution"] > 0
    assert projectiles["peak_bytes"] > 0


def test_small_run_warp_cpu_agrees() -> None:
    pytest.importorskip("warp", reason="NVIDIA Warp is not installed: its comparison is skipped")
    rows = physics.run(["A", "D", "E"], ["sopt", "warp", "warp_graph"], small=True, repeats=2, warmup=0,
                       out=lambda line: None)
    for case in ("A", "D", "E"):
        check_case_rows(rows, case, "warp")
        check_case_rows(rows, case, "warp_graph")   # Warp 1.19 captures and replays graphs on the CPU too


class Failing(physics.Framework):
    """A framework whose runs fail while building with ``exc``."""

    name = "failing"
    memory_how = "test"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.cleaned = False

    def build(self, problem: object, variant: physics.Variant) -> object:
        raise self.exc

    def cleanup(self) -> None:
        self.cleaned = True


@pytest.mark.parametrize("exc, status", [
    (RuntimeError("Failed to allocate 75161927680 bytes on device 'cuda:0'"), "OOM"),   # Warp's message
    (RuntimeError("CUDA error: CUDA_ERROR_OUT_OF_MEMORY"), "OOM"),
    (MemoryError(), "OOM"),
    (ValueError("something else"), "error"),
])
def test_failures_are_reported_not_raised(exc: BaseException, status: str) -> None:
    case = physics.Case("A", "test", lambda: None, [physics.Variant("failing", "failing")])
    fw = Failing(exc)
    row = physics.measure(fw, case, case.variants[0], repeats=1, warmup=0)
    assert row["status"] == status
    assert type(exc).__name__ in row["error"]
    assert fw.cleaned


def test_torch_out_of_memory_is_reported() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    assert physics.is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))


def test_missing_framework_is_reported_and_skipped() -> None:
    fw = Failing(AssertionError("never built"))
    fw.missing = "not installed (No module named 'warp')"
    case = physics.Case("A", "test", lambda: None, [physics.Variant("failing", "failing")])
    row = physics.measure(fw, case, case.variants[0], repeats=1, warmup=0)
    assert row == {"case": "A", "framework": "failing", "status": "not installed (No module named 'warp')"}


@pytest.mark.parametrize("argv, word", [
    (["--cases", "A,X"], "'X'"),
    (["--frameworks", "sopt,jax"], "'jax'"),
    (["--repeats", "0"], "--repeats"),
    (["--c-budget-gib", "0"], "--c-budget-gib"),
])
def test_bad_arguments_name_the_offender(argv: list[str], word: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        physics.parse_args(argv)
    assert word in capsys.readouterr().err


def test_cloth_problem_matches_spring_system_cloth() -> None:
    """The arrays torch and Warp start from are SpringSystem.cloth's (springs, pins, rest lengths, x0)."""
    problem = physics.cloth_problem(5, 4, 3, seed=0)
    run = physics.sopt_run(problem, None)
    sim = run.sim
    assert np.array_equal(sim.springs, problem.springs)
    assert np.array_equal(sim.pinned_mask, problem.pinned)
    assert np.array_equal(sim.coefficient("rest_length").numpy(), problem.rest_length.astype(np.float64))
    assert np.array_equal(sim.coefficient("x0").numpy(), problem.x0.astype(np.float64))
    # (nx-1) ny + nx (ny-1) + 2 (nx-1)(ny-1) springs: the counts the issue quotes for cases A and B
    assert problem.springs.shape[0] == 4 * 4 + 5 * 3 + 2 * 4 * 3
    assert physics.cloth_problem(32, 32, 1, seed=0).springs.shape[0] == 3906
    assert physics.cloth_problem(128, 128, 1, seed=0).springs.shape[0] == 64770


def test_cases_build_the_problems_they_announce() -> None:
    """Full sizes as the issue sets them (read off the builders, nothing built), and at --small each case's
    problem has its own steps (D's builder must not pick up E's step count)."""
    full = {c.key: c.make.args[:3] for c in physics.make_cases(list(physics.CASE_KEYS), False, 0, 4.0)}
    assert full == {"A": (32, 32, 1000), "B": (128, 128, 1000), "C": (1024, 1024, 1000), "C512": (512, 512, 1000),
                    "D": (65536, 1000, 1e-3), "E": (512, 512, 2000)}
    budgets = {c.key: [v.budget_bytes for v in c.variants] for c in physics.make_cases(["C"], False, 0, 4.0)}
    assert budgets == {"C": [4 << 30, None, None, None], "C512": [None, 4 << 30]}
    small = {c.key: c.make() for c in physics.make_cases(["D", "E"], True, 0, 4.0)}
    assert (small["D"].steps, small["D"].x0.shape, small["E"].steps, small["E"].u0.shape) == (60, (64, 2), 30, (12, 10))


def test_compare_gives_gradient_differences_speed_ups_and_targets() -> None:
    def row(framework: str, ms: float, grad: list[float]) -> dict:
        return {"case": "A", "framework": framework, "status": "ok", "ms": ms, "_grads": {"k": np.array(grad)}}

    rows = [row("torch", 150.0, [1.0, -2.002]), row("sopt", 2.0, [1.0, -2.0]), row("warp_graph", 1.0, [1.0, -2.0]),
            {"case": "A", "framework": "warp", "status": "OOM"}]
    physics.compare(rows, judge=True)
    torch_row, _, graph_row, oom_row = rows
    assert torch_row["grad_diff"]["k"] == pytest.approx(0.002 / 2.0)
    assert torch_row["speedup_of_sopt"] == pytest.approx(75.0) and torch_row["target_met"]   # target 50x
    assert graph_row["grad_diff_max"] == 0.0
    assert graph_row["speedup_of_sopt"] == pytest.approx(0.5) and not graph_row["target_met"]   # target 1x
    assert "speedup_of_sopt" not in oom_row
    fresh = [row("sopt", 2.0, [1.0]), row("torch", 150.0, [1.0])]
    physics.compare(fresh, judge=False)   # --small: no verdicts
    assert "target_met" not in fresh[1] and fresh[1]["speedup_of_sopt"] == pytest.approx(75.0)

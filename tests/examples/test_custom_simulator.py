"""examples/custom_simulator.py: a user's Slang pendulum step, fitted through the Trainer, recovers the damping."""

import importlib.util
import pathlib

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "custom_simulator.py"


def test_custom_simulator_recovers_damping() -> None:
    spec = importlib.util.spec_from_file_location("custom_simulator", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary = module.main(fit_steps=150, quiet=True)
    assert summary["gradcheck_max_rel_error"] < 1e-3
    assert summary["rel_error"] < 2e-3            # from 0.05: 80% off at the start
    assert summary["loss"] < 1e-8

"""Fit a damped pendulum's damping with Adam through the Trainer, the simulator being ~20 lines of the user's
own Slang (examples/custom_simulator.slang).

The observations are the pendulum angles of 4 pendulums over 1.2 s, simulated with the true damping
(0.25 1/s); the fit starts from 0.05 1/s. Every Trainer step runs the 60-step rollout and the MSE on the
tape, the backward of every step (SlangPy's .bwds of pendulum_step) and Adam's update in one submission.
sopt.gradcheck first compares the tape's gradient with central differences.

Run: python3 examples/custom_simulator.py   (about 15 s on the software Vulkan driver)
"""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy

import sopt
from sopt.losses import MSELoss
from sopt.optim import Adam
from sopt.sim import State, rollout
from sopt.train import Trainer

HERE = pathlib.Path(__file__).resolve().parent
STEPS, DT = 60, 0.02
THETA0 = np.array([0.3, 0.8, -0.5, 1.2], np.float32)   # initial angles, rad (at rest)
TRUE_DAMPING, G_OVER_L = 0.25, 9.81                    # 1/s, g / length in 1/s^2


def main(fit_steps: int = 150, quiet: bool = False) -> dict[str, float]:
    pendulum = sopt.load_module(HERE / "custom_simulator.slang")

    def simulate(damping: float | sopt.Parameter) -> tuple[State, object]:
        def step(s: State, t: int) -> State:
            return State(x=pendulum.pendulum_step(s.x, damping, G_OVER_L, DT))
        start = State(x=pendulum.pendulum_start(THETA0))
        return rollout(step, start, STEPS, observe="x", at=range(1, STEPS + 1))

    observed = simulate(TRUE_DAMPING).trajectory.to_numpy().copy()   # no tape: runs at once

    damping = sopt.Parameter([0.05], name="damping")
    target = slangpy.Tensor.from_numpy(sopt.get_device(), observed)   # on the GPU once, not per step
    loss_fn = MSELoss()

    def objective(tape: sopt.Tape, step: int):
        return loss_fn(simulate(damping).trajectory, target)

    check = sopt.gradcheck(objective, [damping], eps=1e-3, rtol=1e-2)
    if not quiet:
        print(check)
    trainer = Trainer(objective=objective, optimizer=Adam([damping], lr=0.02), log_every=50, progress=not quiet)
    result = trainer.fit(fit_steps)
    fitted = float(damping.numpy()[0])
    summary = {"fitted_damping": fitted, "true_damping": TRUE_DAMPING,
               "rel_error": abs(fitted - TRUE_DAMPING) / TRUE_DAMPING, "loss": result.metrics["loss"],
               "gradcheck_max_rel_error": check.max_rel_error}
    if not quiet:
        print(f"damping: fitted {fitted:.5f} 1/s, true {TRUE_DAMPING} 1/s (relative error {summary['rel_error']:.2e}); "
              f"final loss {summary['loss']:.3e}")
    return summary


if __name__ == "__main__":
    main()

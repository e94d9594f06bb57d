"""Complete problems built on sopt, run with ``sopt run`` (or ``python -m sopt.problems.<name>``).

:data:`PROBLEMS` is the registry of problems a config may name (``problem = "fit_projectile"``): a config never
imports anything by name outside it. Each entry is imported only when used, so ``sopt run`` starts quickly.
"""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING

from sopt.config.schema import ConfigError

if TYPE_CHECKING:
    from sopt.experiments.problem import Problem

# name -> (module, class, one line for ``sopt problems``)
PROBLEMS: dict[str, tuple[str, str, str]] = {
    "neural_field_image": ("sopt.problems.neural_field_image.problem", "NeuralFieldImage",
                           "an RGB image as a neural field (encoding + MLP), PSNR against the image"),
    "fit_projectile": ("sopt.problems.fit_projectile.problem", "FitProjectile",
                       "a bouncing ball's drag, restitution, launch speed and angle from its positions"),
    "nbody_masses": ("sopt.problems.nbody_masses.problem", "NBodyMasses",
                     "the masses of an orbiting cluster from its trajectories"),
    "neural_controller": ("sopt.problems.neural_controller.problem", "NeuralControllerProblem",
                          "an MLP drives a mass-spring robot's springs to walk (layers and simulator on one tape)"),
    "fit_cloth": ("sopt.problems.fit_cloth.problem", "FitCloth",
                  "a falling cloth's stiffness and damping (or one stiffness per spring)"),
    "heat_inverse": ("sopt.problems.heat_inverse.problem", "HeatInverse",
                     "a plate's conductivity field from sensor temperatures"),
}


def problem_class(name: object, where: str = "problem") -> "type[Problem]":
    """The Problem class registered as ``name``; ConfigError (one line, with a suggestion) otherwise."""
    if not isinstance(name, str) or name not in PROBLEMS:
        near = difflib.get_close_matches(str(name), list(PROBLEMS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        shown = repr(name) if name is not None else "(missing)"
        raise ConfigError([f"config {where} = {shown}: unknown problem{hint} allowed: {', '.join(PROBLEMS)}"])
    module, cls, _ = PROBLEMS[name]
    return getattr(importlib.import_module(module), cls)

"""What the physics-fitting problems (fit_projectile, fit_cloth, heat_inverse, nbody_masses, neural_controller)
share: their config keys, their base class and ``run``/``resume`` from Python.

How a problem plugs in (``problems/<name>/``):

1. ``problem.py`` (or ``config.py``): a pydantic schema, a subclass of :class:`FitConfig` declared with the
   problem's name (``class PendulumConfig(FitConfig, problem="fit_pendulum")``, the one place the name is stated),
   with ``true`` and ``init`` (each a :class:`StrictModel` of the parameters; bounds on ``true`` are the documented
   ranges) and the problem's own keys (sizes, times, ...), each ``Field(default, ge=..., le=..., description="...
   (unit)")``. FitConfig already has ``noise_std``, ``optimizer``, ``schedule``, ``steps``, ``seed``,
   ``log_every``, ``checkpoint_every``; a problem may change their defaults by redeclaring the field.
2. ``problem.py``: a :class:`FittingProblem` subclass with ``schema`` and ``description``. Its
   ``__init__(config)`` builds the simulator, makes the observations from ``config.true``
   (``self.add_noise(clean)`` adds the seeded noise of ``noise_std``) and creates each trained parameter with
   ``self.add_parameter(name, initial, scale, unit)`` (a :class:`ScaledParameter`: the optimiser trains
   ``physical / scale``, the simulator reads ``.physical``, a sopt.Parameter). It implements
   ``objective(tape, step) -> loss`` (sopt.train.Trainer's contract). Optional overrides: ``true_values()`` and
   ``fitted()`` (name -> float or array; default: config.true and the ScaledParameters), ``evaluate()`` (the final
   loss; pick the best of several candidates here), ``predict(points)`` (the simulated observations at given
   parameter values, run without a tape: with it result.json reports each parameter's ``uncertainty``),
   ``progress_metrics()`` (per metrics step), ``plot(out_dir, history)`` (the problem's own PNGs), ``summary()``
   (lines printed at the end).
3. One registration: a built-in problem's name -> (module, class) in
   sopt.experiments.problem.BUILTIN_PROBLEMS; a problem in a package of its own an entry point of the
   ``sopt.problems`` group, or none at all (``sopt run --problem my_package.problem:Pendulum``).

``sopt run --problem NAME [overrides]`` (or ``python -m problems.NAME [overrides]``, the same command), and
:func:`run` / :func:`resume` from Python, then train it with the configured optimiser and schedule and write the
run directory (sopt.experiments.run_dir): ``config.toml``, ``metrics.jsonl`` (with ``value/<name>`` and
``rel_error/<name>`` per metrics step), ``checkpoint.npz``, ``result.json`` (``{"true", "fitted",
"uncertainty", "rel_error", "loss", "steps"}``), ``curves.png`` and the problem's pictures; ``sopt resume DIR``
finishes an interrupted run
with the result of an uninterrupted one. Config errors are one line each (:class:`ConfigError`): the command
prints ``error: ...`` and exits 2.
"""

from sopt.config.schema import ConfigError, StrictModel, defaults, merge, parse_json, validate
from problems.fitting.config import FitConfig, load_config
from problems.fitting.problem import FittingProblem, rel_error
from problems.fitting.runner import RunResult, resume, run
from problems.fitting.scaled_parameter import ScaledParameter

__all__ = ["ConfigError", "FitConfig", "FittingProblem", "RunResult", "ScaledParameter", "StrictModel", "defaults",
           "load_config", "merge", "parse_json", "rel_error", "resume", "run", "validate"]

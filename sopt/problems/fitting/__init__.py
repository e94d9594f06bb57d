"""The shared runner of the physics-fitting problems (fit_projectile, fit_cloth, heat_inverse, nbody_masses, ...).

How a problem plugs in (``sopt/problems/<name>/``):

1. ``config.py`` or in ``problem.py``: a pydantic schema, a subclass of :class:`FitConfig`, declaring ``true``
   and ``init`` (each a :class:`StrictModel` of the parameters; bounds on ``true`` are the documented ranges)
   and the problem's own keys (sizes, times, ...), each ``Field(default, ge=..., le=..., description="... (unit)")``.
   FitConfig already has ``noise_std``, ``optimizer``, ``schedule``, ``steps``, ``seed``, ``log_every``,
   ``checkpoint_every``; a problem may change their defaults by redeclaring the field.
2. ``problem.py``: a :class:`FittingProblem` subclass with ``name`` (the package name), ``schema`` and
   ``description``. Its ``__init__(config)`` builds the simulator, makes the observations from ``config.true``
   (``self.add_noise(clean)`` adds the seeded noise of ``noise_std``) and creates each trained parameter with
   ``self.add_parameter(name, initial, scale, unit)`` (a :class:`ScaledParameter`: the optimiser trains
   ``physical / scale``, the simulator reads ``.physical``, a sopt.Parameter). It implements
   ``objective(tape, step) -> loss`` (sopt.train.Trainer's contract). Optional overrides: ``true_values()`` and
   ``fitted()`` (name -> float or array; default: config.true and the ScaledParameters), ``evaluate()`` (the final
   loss; pick the best of several candidates here), ``progress_metrics()`` (per metrics step), ``plot(out_dir,
   history)`` (the problem's own PNGs), ``summary()`` (lines printed at the end).
3. ``__main__.py``: ``from sopt.problems.fitting.cli import entry_point; entry_point(Problem)``.

The runner (:func:`run`, :func:`resume`, CLI :func:`sopt.problems.fitting.cli.main`) then trains it with the
configured optimiser and schedule and writes ``config.json``, ``metrics.jsonl`` (with ``value/<name>`` and
``rel_error/<name>`` per metrics step), ``checkpoint.npz``, ``result.json`` (``{"true", "fitted", "rel_error",
"loss", "steps"}``), ``curves.png`` and the problem's pictures; ``--resume DIR`` finishes an interrupted run with
the result of an uninterrupted one. Config errors are one line each (:class:`ConfigError`): the CLI prints
``error: ...`` and exits 2.
"""

from sopt.config.schema import ConfigError, StrictModel, defaults, merge, parse_json, validate
from sopt.problems.fitting.config import FitConfig, load_config
from sopt.problems.fitting.problem import FittingProblem, rel_error
from sopt.problems.fitting.runner import OutputError, RunResult, resume, run
from sopt.problems.fitting.scaled_parameter import ScaledParameter

__all__ = ["ConfigError", "FitConfig", "FittingProblem", "OutputError", "RunResult", "ScaledParameter",
           "StrictModel", "defaults", "load_config", "merge", "parse_json", "rel_error", "resume", "run", "validate"]

"""Complete problems built on sopt, run with ``sopt run --problem NAME`` (or ``python -m problems.NAME``, the
same command).

:data:`PROBLEMS` names the built-in ones (name -> (module, class)); :func:`problem_class` finds any problem a config
may name: a built-in, an installed package's ``sopt.problems`` entry point or ``module:Class``
(sopt.experiments.problem, where the registry lives). Each is imported only when named, so ``sopt run`` starts
quickly.
"""

from sopt.experiments.problem import BUILTIN_PROBLEMS as PROBLEMS
from sopt.experiments.problem import problem_class, problem_names

__all__ = ["PROBLEMS", "problem_class", "problem_names"]

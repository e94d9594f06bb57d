"""Complete problems built on sopt, each runnable as ``python -m sopt.problems.<name>`` from the repository root."""

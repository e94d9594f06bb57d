"""Complete problems built on sopt, each runnable as ``python -m problems.<name>`` from the repository root."""

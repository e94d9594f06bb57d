"""``python -m problems.<this package> [CONFIG] [overrides...] [--out DIR]``: the same command as
``sopt run --problem <this package> ...`` (sopt.experiments.cli)."""

from sopt.experiments.cli import problem_module_main

if __name__ == "__main__":
    problem_module_main(__package__)

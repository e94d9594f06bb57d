"""A problem that reads a data file, for the input-fingerprint tests: fit_projectile that reads the file its
config's ``data`` names (``--problem tests.experiments.input_problem:DataBall data=PATH``: a number, kept as
``data_value``) and names it in ``input_files``, so a run records its fingerprint and a resume notices a change."""

from __future__ import annotations

import pathlib

from pydantic import Field

from problems.fit_projectile.problem import FitProjectile, ProjectileConfig


class DataBallConfig(ProjectileConfig, problem="data_ball"):
    data: str = Field("data.txt", description="a text file holding one number")


class DataBall(FitProjectile):
    schema = DataBallConfig
    description = "fit_projectile that reads a data file (tests)"

    def __init__(self, config: DataBallConfig) -> None:
        self.data_value = float(pathlib.Path(config.data).read_text(encoding="utf-8"))
        super().__init__(config)

    def input_files(self) -> list[pathlib.Path]:
        return [pathlib.Path(self.config.data)]

"""Hatch build hook: the wheel's ``sopt/_build_info.py`` records the git commit of the checkout it was built from.

An installed sopt has no ``.git`` beside it, so env.json's ``git_commit`` would always be null; this reads the
commit at install time (``pip install .`` builds in the checkout) with ``sopt._build_info.git_commit`` itself.
"""

from __future__ import annotations

import importlib.util
import pathlib
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LINE = "GIT_COMMIT: str | None = None"


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = pathlib.Path(self.root)
        source = root / "sopt" / "_build_info.py"
        spec = importlib.util.spec_from_file_location("_sopt_build_info", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        text = source.read_text()
        if LINE not in text:
            raise RuntimeError(f"hatch_build: {source} has no line {LINE!r} to fill in")
        self._tmp = tempfile.TemporaryDirectory()
        built = pathlib.Path(self._tmp.name) / "_build_info.py"
        built.write_text(text.replace(LINE, f"GIT_COMMIT: str | None = {module.git_commit(root)!r}", 1))
        build_data["force_include"][str(built)] = "sopt/_build_info.py"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        self._tmp.cleanup()

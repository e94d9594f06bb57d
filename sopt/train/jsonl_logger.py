"""JSONLLogger: the metrics of every metrics step as one JSON object per line."""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import TYPE_CHECKING, Any

from sopt.utils import atomic_write
from sopt.train.callback import Callback
from sopt.utils.validation import check_bool, check_path

if TYPE_CHECKING:
    from sopt.train.trainer import Trainer, TrainResult


def _json_safe(value: Any) -> Any:
    # JSON has no NaN/Inf: write them as null rather than emit a non-standard file.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JSONLLogger(Callback):
    """Writes ``{"step": ..., "loss": ..., "lr": ..., "steps_per_s": ..., "time_s": ..., <evaluation metrics>}``
    per metrics step to ``path`` and, when training ends, ``{"step": ..., "event": "end", "reason": ...}``.

    Each line is written and flushed as it comes, so the file is complete up to the last metrics step even if
    the process dies. ``append=False`` starts a new file at ``fit`` (atomically: a link at ``path`` is replaced,
    not followed); True continues one (for resumed runs). A line is never appended through a symbolic link: one
    planted at ``path`` meanwhile is an OSError naming the file (:func:`sopt.utils.atomic_write.append_text`).
    """

    order = 80

    def __init__(self, path: str | os.PathLike[str], every: int | None = None, append: bool = False) -> None:
        super().__init__(every)
        self.path = pathlib.Path(check_path(path, "JSONLLogger path"))
        self.append = check_bool(append, "append")

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps({k: _json_safe(v) for k, v in record.items()}, allow_nan=False)
        atomic_write.append_text(self.path, line + "\n")

    def on_train_start(self, trainer: "Trainer") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.append:
            atomic_write.write_text(self.path, "")

    def on_metrics(self, trainer: "Trainer", metrics: dict[str, Any]) -> None:
        self._write(metrics)

    def on_train_end(self, trainer: "Trainer", result: "TrainResult") -> None:
        self._write({"step": result.steps, "event": "end", "reason": result.stop_reason})

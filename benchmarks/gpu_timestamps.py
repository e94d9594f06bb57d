"""GPU timestamps around every dispatch sopt records, for `physics_split.py` and `train_step_split.py`.

While :meth:`DispatchStamps.patched` is active, a timestamp is written into sopt's command buffer after a tape opens
its encoder ("start"), before and after every compute dispatch recorded into an encoder (``BoundKernel.dispatch``
and, where the checkout has the kernel layer, SlangPy launches through ``sopt.runtime.kernel``), and before the submission
("submit"). :meth:`DispatchStamps.spans` turns the last iteration's marks into seconds: the whole buffer, each
dispatch (labelled by its order, its declared kernel or Slang function where known, and its thread count) and the
rest (clears, copies, gaps). It patches only what the checkout has, so older trees (``physics_split.py --tree``)
work too.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from typing import Any, Iterator

MAX_MARKS = 256


class DispatchStamps:
    """Timestamps in the command buffers of one sopt checkout (its ``device``, ``tape`` and, if any, ``kernel``
    modules and SlangPy as ``spy``)."""

    def __init__(self, spy: Any, dev: Any, tp: Any, kn: Any = None) -> None:
        self.dev, self.tp, self.kn = dev, tp, kn
        self.pool = dev.get_device().create_query_pool(type=spy.QueryType.timestamp, count=MAX_MARKS)
        self.marks: list[str] = []

    def stamp(self, encoder: Any, label: str) -> None:
        if encoder is not None and len(self.marks) < MAX_MARKS:
            encoder.write_timestamp(self.pool, len(self.marks))
            self.marks.append(label)

    def _around(self, encoder: Any, label: str, record: Any) -> Any:
        if encoder is None:   # submitted at once, outside the buffer being timed
            return record()
        n = sum(1 for m in self.marks if m.startswith("begin ")) + 1
        name = f"{n:2d} {label}"
        self.stamp(encoder, "begin " + name)
        out = record()
        self.stamp(encoder, "end " + name)
        return out

    def _labels(self) -> dict[int, str]:
        """id of each loaded compute kernel -> its declaration's label (checkouts with sopt.runtime.kernel only)."""
        if self.kn is None or not hasattr(self.kn, "_programs"):
            return {}
        with warnings.catch_warnings():   # isinstance on every live object wakes deprecated torch aliases
            warnings.simplefilter("ignore")
            declared = {k._key(): k.label for k in gc.get_objects() if isinstance(k, self.kn.Kernel)}
        return {id(kernel): declared.get(key[1:], key[2]) for key, kernel in self.kn._programs.items()}

    @contextlib.contextmanager
    def patched(self) -> Iterator["DispatchStamps"]:
        """Stamp the command buffers recorded inside the ``with`` block."""
        dev, tp, kn = self.dev, self.tp, self.kn
        saved = [(dev.BoundKernel, "dispatch", dev.BoundKernel.dispatch), (tp.Tape, "__enter__", tp.Tape.__enter__),
                 (dev, "submit", dev.submit)]
        real_dispatch, real_enter, real_submit = (s[2] for s in saved)
        labels = self._labels()

        def dispatch(bound: Any, threads: int, encoder: Any = None) -> None:
            label = f"{labels.get(id(bound.kernel), 'dispatch')} ({threads} threads)"
            self._around(encoder, label, lambda: real_dispatch(bound, threads, encoder))

        def enter(tape: Any) -> Any:
            out = real_enter(tape)
            self.stamp(tape.encoder, "start")
            return out

        def submit(encoder: Any) -> None:
            self.stamp(encoder, "submit")
            real_submit(encoder)

        dev.BoundKernel.dispatch, tp.Tape.__enter__, dev.submit = dispatch, enter, submit
        if kn is not None and hasattr(kn, "_run"):
            real_run = kn._run
            saved.append((kn, "_run", real_run))

            def run(node: Any, encoder: Any, args: tuple, kwargs: dict) -> None:
                self._around(encoder, str(getattr(node, "name", "function")),
                             lambda: real_run(node, encoder, args, kwargs))

            kn._run = run
        try:
            yield self
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)

    def spans(self) -> dict[str, float]:
        """Seconds per span of the last stamped iteration: the buffer, each dispatch, and the rest."""
        at = dict(zip(self.marks, self.pool.get_timestamp_results(0, len(self.marks))))
        out = {"command buffer (start to submit)": at["submit"] - at["start"]}
        inside = 0.0
        for label, begin in at.items():
            if label.startswith("begin "):
                name = label[len("begin "):]
                out[name] = at["end " + name] - begin
                inside += out[name]
        out["outside dispatches (clears, copies, gaps)"] = out["command buffer (start to submit)"] - inside
        return out

    def collect(self, iteration: Any, count: int) -> dict[str, list[float]]:
        """Run ``iteration`` (records and submits one command buffer) ``count`` times stamped, each followed by a
        wait; every span's seconds per run."""
        spans: dict[str, list[float]] = {}
        with self.patched():
            for _ in range(count):
                self.marks.clear()
                self.pool.reset()
                iteration()
                self.dev.synchronize()
                for name, value in self.spans().items():
                    spans.setdefault(name, []).append(value)
        return spans

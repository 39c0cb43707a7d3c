"""A progress bar for bulk work, on standard error, only where a person watches it.

Shown when standard error is a terminal, `-q` was not given, and the work
has taken more than `DELAY` seconds (quick work never flickers a bar);
never on a pipe or a file. Transient: it disappears when the work ends,
leaving the command's own output.
"""

from __future__ import annotations

import sys
import time
from typing import Any

DELAY = 1.0


class BulkProgress:
    """`update(done)` after each batch; `close()` at the end (also on errors)."""

    def __init__(self, label: str, total: int | None, *, quiet: bool = False,
                 delay: float = DELAY) -> None:
        self._label = label
        self._total = total
        self._enabled = not quiet and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self._started = time.monotonic()
        self._delay = delay
        self._bar: Any = None
        self._task: Any = None

    def update(self, done: int) -> None:
        if not self._enabled:
            return
        if self._bar is None:
            if time.monotonic() - self._started < self._delay:
                return
            from rich.progress import Progress

            from runnerq_cli.cli.output import console

            self._bar = Progress(console=console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=self._total)
        self._bar.update(self._task, completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> BulkProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

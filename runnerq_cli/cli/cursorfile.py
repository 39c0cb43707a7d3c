"""`tail --cursor-file`: keep the saved position within 0.1 s of what was printed.

A tail killed by SIGKILL resumes from this file, so whatever it printed
after the last write is printed again. The promise (docs/robustness.md) is
at most 0.2 s of events, idle included: so the file is written by a timer
thread, not only when the next event arrives (after a burst and silence the
last write could otherwise be seconds behind the output).

The iterating thread hands over a copy of the cursor after each printed
event (`printed`); the timer thread, every `every` seconds, flushes stdout
first (a saved cursor never runs ahead of the output) and then replaces the
file atomically (write a temporary file, fsync it, `os.replace`). Nothing is
written while nothing new was printed, so an idle tail costs no I/O.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING

from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.events import EventCursor

SAVE_EVERY = 0.1  # seconds: the timer; a write lags the output by at most this plus one write


def write_cursor_file(path: str, text: str) -> None:
    """Replace `path` atomically: a reader (or a resume after a kill) sees old or new, whole."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
        fh.flush()
        with contextlib.suppress(OSError):
            os.fsync(fh.fileno())  # survives a machine crash too, not only a killed process
    os.replace(tmp, path)


class CursorFileSaver:
    """Saves the cursor of the last printed event to `path`, from a timer thread."""

    def __init__(self, path: str, cursor: EventCursor, every: float = SAVE_EVERY) -> None:
        self.path = path
        self.every = every
        self.output_lock = threading.Lock()  # held while printing, and while flushing here
        self.last: EventCursor = _copy(cursor)  # the cursor of the last printed event
        self._pending: EventCursor | None = None
        self.error: OSError | None = None
        self._save_lock = threading.Lock()  # one writer of the file at a time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cursor-file", daemon=True)

    def start(self) -> None:
        """Write the starting position (a kill before any event resumes from it) and run."""
        try:
            self._save(self.last)
        except OSError as exc:
            self.error = exc
            self.check()
        self._thread.start()

    def printed(self, cursor: EventCursor) -> None:
        """After an event is printed (call with `output_lock` held): its position is due."""
        self.last = self._pending = _copy(cursor)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.save_pending()
            except OSError as exc:  # reported by the iterating thread (check()), no traceback
                self.error = exc
                return

    def check(self) -> None:
        """Raise, in the calling thread, a write error the timer thread met."""
        if self.error is not None:
            raise InvalidArgument(f"--cursor-file {self.path}: cannot write it "
                                  f"({self.error.strerror or self.error})")

    def save_pending(self) -> None:
        with self.output_lock:
            pending, self._pending = self._pending, None
            if pending is None:
                return
            with contextlib.suppress(BrokenPipeError, ValueError, OSError):
                sys.stdout.flush()
        self._save(pending)

    def _save(self, cursor: EventCursor) -> None:
        with self._save_lock:
            write_cursor_file(self.path, cursor.encode())

    def close(self) -> None:
        """Stop the timer and save the last printed position."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        with self.output_lock:
            self._pending = None
        if self.error is None:
            try:
                self._save(self.last)
            except OSError as exc:
                self.error = exc


def _copy(cursor: EventCursor) -> EventCursor:
    return type(cursor)(cursor.ingested_at, dict(cursor.seen), cursor.floor)

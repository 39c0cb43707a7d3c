"""`tail --cursor-file`: keep the saved position within 0.1 s of what was printed.

A tail killed by SIGKILL resumes from this file, so whatever it printed
after the last write is printed again. The promise (docs/robustness.md) is
at most 0.2 s of events, idle included: so the file is written by a timer
thread, not only when the next event arrives (after a burst and silence the
last write could otherwise be seconds behind the output).

The timer thread copies the live cursor itself (the iterating thread only
notes, in O(1), which position it printed last), so a long burst costs no
copy per event. The stream advances the cursor just before it hands an
event over, so a copy may catch a position one event ahead of the output:
the copy is used only if it counts as many events handed over as the
output printed, else it is taken again a few milliseconds later. Then
stdout is flushed (a saved cursor never runs ahead of the output) and the
file replaced atomically (a temporary file, `os.replace`; fsynced at most
once a second, against machine crashes). Nothing is written while nothing
new was printed, so an idle tail costs no I/O.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.events import EventCursor

SAVE_EVERY = 0.1  # seconds: the timer; a write lags the output by at most this plus one write
RETRY_EVERY = 0.005  # seconds: a copy caught mid-event is taken again this soon
FSYNC_EVERY = 1.0  # seconds: a slow disk's fsync must not hold the 0.1 s timer back


def write_cursor_file(path: str, text: str, *, durable: bool = True) -> None:
    """Replace `path` atomically: a reader (or a resume after a kill) sees old or new, whole.

    `durable` also fsyncs it first, so it survives a machine crash (a killed
    process needs no fsync: the page cache outlives it)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
        if durable:
            fh.flush()
            with contextlib.suppress(OSError):
                os.fsync(fh.fileno())
    os.replace(tmp, path)


def _marker(cursor: EventCursor) -> int:
    """Which position a cursor is at: how many events were handed over through it."""
    return cursor.delivered


class CursorFileSaver:
    """Saves the position of the last printed event to `path`, from a timer thread.

    The iterating thread prints while holding `output_lock`, then calls `printed()`.
    """

    def __init__(self, path: str, live: Callable[[], EventCursor],
                 every: float = SAVE_EVERY) -> None:
        self.path = path
        self.every = every
        self._live = live  # the stream's cursor, advanced by the iterating thread
        self.output_lock = threading.Lock()  # held while printing, and while copying here
        self.last: EventCursor = self._copy()  # the position of the last printed event
        self.error: OSError | None = None
        self._printed = _marker(self.last)
        self._dirty = False  # printed since the last copy
        self._save_lock = threading.Lock()  # one writer of the file at a time
        self._synced = -FSYNC_EVERY  # when the file was last fsynced (monotonic)
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

    def printed(self) -> None:
        """After an event is printed (call with `output_lock` held): O(1)."""
        self._printed = _marker(self._live())
        self._dirty = True

    def check(self) -> None:
        """Raise, in the calling thread, a write error the timer thread met."""
        if self.error is not None:
            raise InvalidArgument(f"--cursor-file {self.path}: cannot write it "
                                  f"({self.error.strerror or self.error})")

    def _copy(self) -> EventCursor:
        return self._live().copy()

    def _printed_position(self) -> EventCursor | None:
        """A copy of the live cursor if it is at the last printed event, else None."""
        copy = self._copy()
        return copy if _marker(copy) == self._printed else None

    def _run(self) -> None:
        wait = self.every
        while not self._stop.wait(wait):
            try:
                wait = self.every if self.save_pending() else RETRY_EVERY
            except OSError as exc:  # reported by the iterating thread (check()), no traceback
                self.error = exc
                return

    def save_pending(self) -> bool:
        """Save the printed position if it moved; False when caught mid-event (retry soon)."""
        with self.output_lock:
            if not self._dirty:
                return True
            position = self._printed_position()
            if position is None:
                return False
            self._dirty = False
            self.last = position
            with contextlib.suppress(BrokenPipeError, ValueError, OSError):
                sys.stdout.flush()
        self._save(position)
        return True

    def _save(self, cursor: EventCursor, *, last: bool = False) -> None:
        with self._save_lock:
            now = time.monotonic()
            durable = last or now - self._synced >= FSYNC_EVERY
            write_cursor_file(self.path, cursor.encode(), durable=durable)
            if durable:
                self._synced = now

    def close(self) -> None:
        """Stop the timer and save the last printed position (an event the stream
        handed over but that was never printed is not in it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        # (bounded: a reader that stopped reading can hold the timer in a stdout flush)
        if self.output_lock.acquire(timeout=2):
            try:
                position = self._printed_position() if self._dirty else None
                if position is not None:
                    self.last = position
            finally:
                self.output_lock.release()
        if self.error is None:
            try:
                self._save(self.last, last=True)
            except OSError as exc:
                self.error = exc

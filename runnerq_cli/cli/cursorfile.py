"""`tail --cursor-file`: the saved position never behind what was printed by more than
the one event being printed when the process died.

A tail killed by SIGKILL resumes from this file, so whatever it printed but
did not record is printed again. Two parts keep that to the line being
printed at the kill:

- A journal. After each event's line is written out (stdout flushed), its
  id and position are appended to the file as one short line
  (`+ID MILLIS`), with one unbuffered `write`: O(1), no rewrite. A reader
  (`read_cursor_file`) applies these lines to the snapshot above them; a
  last line cut short by the kill is ignored.
- A snapshot. A timer thread rewrites the file every 0.1 s whenever
  something was printed since (the encoded cursor, then an empty journal):
  the journal stays short. The timer copies the live cursor itself (the
  iterating thread only counts, in O(1), how many events it printed), so a
  long burst costs no copy per event. The stream advances the cursor just
  before it hands an event over, so a copy may catch a position one event
  ahead of the output: the copy is used only if it counts as many events
  handed over as the output printed, else it is taken again a few
  milliseconds later. The new file is written beside the old one
  (`FILE.tmp`, fsynced at most once a second, against machine crashes) and
  `os.replace`d over it; journal lines appended meanwhile are appended to
  the new file too. Nothing is written while nothing new was printed, so an
  idle tail costs no I/O.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.event_cursor import EventCursor

SAVE_EVERY = 0.1  # seconds: the timer; a write lags the output by at most this plus one write
RETRY_EVERY = 0.005  # seconds: a copy caught mid-event is taken again this soon
FSYNC_EVERY = 1.0  # seconds: a slow disk's fsync must not hold the 0.1 s timer back
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _write_beside(path: str, text: str, *, durable: bool) -> str:
    """Write `text` to `path`.tmp (fsynced if `durable`); returns that path."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
        if durable:
            fh.flush()
            with contextlib.suppress(OSError):
                os.fsync(fh.fileno())
    return tmp


def journal_line(event_id: str, position: datetime) -> bytes:
    """One journal entry: the event's id and its position (milliseconds since the epoch)."""
    millis = round((position - EPOCH).total_seconds() * 1000)
    return f"+{event_id} {millis}\n".encode()


def read_cursor_file(text: str) -> tuple[str, list[tuple[str, datetime]]]:
    """(the snapshot's cursor text, the journal's (id, position) entries after it)."""
    lines = text.split("\n")
    entries: list[tuple[str, datetime]] = []
    for line in lines[1:-1]:  # a last line without its newline was cut short by a kill
        parts = line[1:].split(" ") if line.startswith("+") else []
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            continue
        with contextlib.suppress(OverflowError):
            entries.append((parts[0], EPOCH + timedelta(milliseconds=int(parts[1]))))
    return lines[0], entries


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
        self._journal: int | None = None  # append-only descriptor of the current file
        self._pending: list[bytes] | None = None  # journal lines while a snapshot is written
        self._closing = False

    def start(self) -> None:
        """Write the starting position (a kill before any event resumes from it) and run."""
        try:
            self._save(self.last)
        except OSError as exc:
            self.error = exc
            self.check()
        self._thread.start()

    def printed(self, event: Any = None) -> None:
        """After an event is printed (call with `output_lock` held): O(1). With the event,
        its line is flushed out and recorded in the journal at once."""
        self._printed = _marker(self._live())
        self._dirty = True
        if event is None or self._journal is None or self.error is not None:
            return
        entry = journal_line(str(event.id), event.ingested_at or event.timestamp or EPOCH)
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            sys.stdout.flush()  # the line is out before the file says so
        if self._pending is not None:
            self._pending.append(entry)
        try:
            os.write(self._journal, entry)
        except OSError as exc:
            self.error = exc

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
        """Write the snapshot beside the file, then (holding the output) put it in place
        with the journal lines printed meanwhile, and append to it from then on."""
        with self._save_lock:
            now = time.monotonic()
            durable = last or now - self._synced >= FSYNC_EVERY
            with self._output():
                self._pending = []
            try:
                tmp = _write_beside(self.path, cursor.encode(), durable=durable)
                with self._output():
                    os.replace(tmp, self.path)
                    if self._journal is not None:
                        os.close(self._journal)
                        self._journal = None
                    if not last:
                        self._journal = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                        for entry in self._pending or ():
                            os.write(self._journal, entry)
            finally:
                self._pending = None
            if durable:
                self._synced = now

    def _output(self) -> Any:
        """The output lock, unless this thread holds it already (close)."""
        return contextlib.nullcontext() if self._closing else self.output_lock

    def close(self) -> None:
        """Stop the timer and save the last printed position (an event the stream
        handed over but that was never printed is not in it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._closing = True  # the timer is gone: no other thread takes the output lock
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

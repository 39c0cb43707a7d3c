"""Stop a bulk command cleanly on Ctrl-C or SIGTERM: finish the batch, report, audit.

    with stop_on_signal() as stop:
        backend.bulk.apply(..., should_stop=stop.is_set)

The first SIGINT or SIGTERM only sets the flag: the backend finishes the
batch in progress, stops before the next one, records the run as
interrupted in the audit with what it did, and the command prints that and
exits 130 (ExitCode.INTERRUPTED). A second signal stops at once
(KeyboardInterrupt: the batch in progress is abandoned; the audit record
keeps the intent and the progress of the batches before it). After an
interruption, signals are ignored once the block ends, so the report that names
what was done comes out whole (the command only reports and exits 130).

`stop_on_signal(at_once=False)` (`enqueue --from`, `dlq import`): every signal only
sets the flag. A line stream cannot be rerun by id like a bulk action: a batch cut
half-way leaves lines written past the last line the report can name, and a rerun
with `--skip-lines N` (or of lines without an idempotency key) writes them twice. So
the batch being written when a signal arrives is finished and the run stops; the
report names the last line really written. The wait is bounded: a batch holds at
most `batch_size` lines and INPUT_BATCH_BYTES (4 MiB), written in a few commands
under the client's timeouts (`socket_timeout`, `server_selection_timeout`), and
the reading and validating parts stop as soon as the flag is set.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class StopFlag:
    """Set by the first signal; the second raises KeyboardInterrupt (unless not
    `at_once`: then every signal only sets it)."""

    def __init__(self, *, at_once: bool = True) -> None:
        self._event = threading.Event()
        self._at_once = at_once
        self.signal_name: str | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """True once set; waits at most `timeout` seconds (a serving loop's tick)."""
        return self._event.wait(timeout)

    def handle(self, signum: int, frame: Any) -> None:
        if not self._event.is_set():
            self.signal_name = signal.Signals(signum).name
            self._event.set()
        elif self._at_once:
            raise KeyboardInterrupt


@contextmanager
def stop_on_signal(*, at_once: bool = True) -> Iterator[StopFlag]:
    """Install the handlers for the block (main thread only; elsewhere the flag stays
    unset). `at_once=False`: a second signal does not cut the work in progress."""
    flag = StopFlag(at_once=at_once)
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {sig: signal.signal(sig, flag.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        if flag.is_set():
            # Interrupted: the command only exits 130 from here. A later signal (while
            # the process exits) must not kill it with the default action (-15, exit
            # 143): it is ignored. SIG_IGN, not a Python handler: the interpreter's
            # shutdown puts those back to the default, an ignored signal stays ignored.
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
        else:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

"""A change stream as a wake-up: a thread follows it and calls `on_change`, coalesced.

Who waits for work or events (an idle worker, a tail) reads with its own queries; the
stream only says when to read again. So a change stream here never carries what it
reports (each pipeline projects its events down to their resume token) and a burst of
changes costs one read, not one per change: the consumer's flag (a `threading.Event`) is
set by each change and cleared by the consumer before it reads, so every change made
while it reads is one more read at most, however many they are.

Correctness needs one rule of the consumer: clear the flag, then read, then wait on the
flag. A change after the read began sets the flag again; a change before the stream was
open is covered because opening (and every reopening) calls `on_change` too.

Where the server offers no change streams (a standalone `mongod`, the dev server) `open`
answers False and says nothing above debug level: polling is the fallback, as before.
A stream that breaks calls `on_change` (the consumer reads, then polls) and is reopened
at most once per REOPEN_EVERY seconds by `ensure`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runnerq_cli.backend import LOGGER_NAME
from runnerq_cli.backend.store.cursors import ChangeStream
from runnerq_cli.backend.store.driver import Collection

log = logging.getLogger(LOGGER_NAME)
REOPEN_EVERY = 30.0  # seconds between attempts to reopen a stream that broke


class ChangeWake:
    """Follows `collection`'s changes matching `pipeline` in a daemon thread."""

    def __init__(self, collection: Collection, pipeline: Sequence[Mapping[str, Any]],
                 on_change: Callable[[], None], *, max_await: float = 1.0,
                 name: str = "runnerq-changes",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._collection = collection
        self._pipeline = list(pipeline)
        self._on_change = on_change
        self._max_await_ms = max(1, int(max_await * 1000))
        self._name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._live = False
        self._refused = False
        self._tried_at: float | None = None
        self.changes = 0  # change events received (tests, benchmarks)
        self.opened = 0  # streams opened
        self.error: Exception | None = None  # what ended the last stream, if anything

    @property
    def live(self) -> bool:
        """True while a stream is open: every change from now on will call `on_change`."""
        return self._live

    @property
    def refused(self) -> bool:
        """True once the server said it offers no change streams (never tried again)."""
        return self._refused

    def open(self) -> bool:
        """Open the stream (in the caller's thread) and start following it; False where the
        server refuses change streams or cannot be reached now (then `ensure` retries)."""
        with self._lock:
            if self._closed or self._refused:
                return False
            if self._live:
                return True
            self._tried_at = self._clock()
            try:
                stream = self._collection.watch(self._pipeline,
                                                max_await_time_ms=self._max_await_ms)
            except Exception as exc:  # refused (no replica set) or away: poll instead
                from runnerq_cli.backend.store.failures import server_away

                self.error = exc
                self._refused = not server_away(exc)
                log.debug("no change stream (%s): polling", type(exc).__name__)
                return False
            self._live = True
            self.opened += 1
            self.error = None
        threading.Thread(target=self._follow, args=(stream,), name=self._name,
                         daemon=True).start()
        self._on_change()  # what changed before the stream opened: read it now
        return True

    def ensure(self) -> bool:
        """`live`, reopening a stream that broke (at most once per REOPEN_EVERY)."""
        if self._live:
            return True
        if self._refused or self._closed:
            return False
        if self._tried_at is not None and self._clock() - self._tried_at < REOPEN_EVERY:
            return False
        return self.open()

    def close(self) -> None:
        """Stop following (the thread ends within `max_await`)."""
        self._closed = True

    def _follow(self, stream: ChangeStream) -> None:
        try:
            with stream:
                while not self._closed and stream.alive:
                    if stream.try_next() is not None:
                        self.changes += 1
                        self._on_change()
        except Exception as exc:  # the consumer reads and polls; `ensure` reopens
            self.error = exc
            log.debug("change stream ended (%s): polling until it reopens",
                      type(exc).__name__)
        finally:
            self._live = False
            if not self._closed:
                self._on_change()

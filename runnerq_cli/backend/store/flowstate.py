"""What one process knows of the queue's flow limits (docs/design.md, "Flow control"):
which types are limited, read at most every `REFRESH` seconds, and which limited
types it leaves alone for a while because they were full (so a worker does not send
claims in a loop against a full limit).

A worker that follows the limit documents' changes (`watch`, a change stream: a slot
freed anywhere in the fleet, a limit changed) leaves a type full by its concurrency alone
until told, not for FULL_BACKOFF; `retry_in` bounds its idle wait by what no write
announces (a rate's next start, a stale holder's `until`).

Only a cache: the limits themselves are checked by the server in the take's update.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from runnerq_cli.backend.store.driver import Collection

REFRESH = 5.0  # seconds a claimer keeps its list of limited types before reading it again


class _Live(Protocol):
    @property
    def live(self) -> bool: ...


class FlowState:
    """The limited types as last read, and the full ones' back-off (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._types: frozenset[str] = frozenset()
        self._read_at: float | None = None
        self._blocked: dict[str, float] = {}
        self._wake_by: float | None = None  # a time to look again that no write announces
        self.watch: _Live | None = None  # the limit documents' change stream, if followed
        self._throttled: dict[str, int] = {}  # starts put off by a full limit, by type

    @property
    def told(self) -> bool:
        """True while a change stream reports every slot freed and every limit changed."""
        return self.watch is not None and self.watch.live

    def known(self) -> frozenset[str]:
        """The limited types as last read (no command)."""
        with self._lock:
            return self._types

    def limited(self, limits: Collection) -> frozenset[str]:
        """The limited types: one `find` of the limit documents' ids every REFRESH
        seconds at most (a queue without limits pays that and nothing else)."""
        with self._lock:
            if self._read_at is not None and self._clock() - self._read_at < REFRESH:
                return self._types
        found = frozenset(str(doc["_id"]) for doc in limits.find({}, {"_id": 1}))
        with self._lock:
            self._types, self._read_at = found, self._clock()
            return found

    def expire(self) -> None:
        """Read the limited types again at the next claim (a limit set or removed here)."""
        with self._lock:
            self._read_at = None

    def blocked(self, activity_type: str) -> bool:
        with self._lock:
            until = self._blocked.get(activity_type)
            return until is not None and self._clock() < until

    def block(self, activity_type: str, seconds: float) -> None:
        with self._lock:
            self._blocked[activity_type] = self._clock() + max(0.0, seconds)

    def unblock(self, activity_type: str) -> None:
        """A slot of this type freed here: the next claim may try it at once."""
        with self._lock:
            self._blocked.pop(activity_type, None)

    def throttle(self, activity_type: str) -> None:
        """A start of `activity_type` put off: its limit (or its key's) was full."""
        with self._lock:
            self._throttled[activity_type] = self._throttled.get(activity_type, 0) + 1

    def drain_throttled(self) -> dict[str, int]:
        """The starts put off since the last call, by type (the worker's metrics)."""
        with self._lock:
            out, self._throttled = self._throttled, {}
            return out

    def changed(self) -> None:
        """A limit document changed (a slot freed elsewhere, a limit set or removed):
        every type may be tried at once, and the list of limited types is read again."""
        with self._lock:
            self._blocked.clear()
            self._read_at = None
            self._wake_by = None

    def wake_by(self, seconds: float) -> None:
        """Look again within `seconds` at the latest: a start no write will announce (a
        key's rate, a holder whose claim may never land) becomes possible then."""
        at = self._clock() + max(0.0, seconds)
        with self._lock:
            if self._wake_by is None or self._wake_by <= self._clock() or at < self._wake_by:
                self._wake_by = at

    def retry_in(self) -> float | None:
        """Seconds until a type left alone may be tried again, or a `wake_by` falls due;
        None when nothing waits on a clock (an idle worker may then wait to be told)."""
        now = self._clock()
        with self._lock:
            ends = [until for until in self._blocked.values() if until > now]
            if self._wake_by is not None and self._wake_by > now:
                ends.append(self._wake_by)
        return min(ends) - now if ends else None

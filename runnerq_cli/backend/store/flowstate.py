"""What one process knows of the queue's flow limits (docs/design.md, "Flow control"):
which types are limited, read at most every `flow.REFRESH` seconds, and which limited
types it leaves alone for a while because they were full (so a worker does not send
claims in a loop against a full limit).

Only a cache: the limits themselves are checked by the server in the take's update.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from runnerq_cli.backend.domain.flow import REFRESH
from runnerq_cli.backend.store.driver import Collection


class FlowState:
    """The limited types as last read, and the full ones' back-off (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._types: frozenset[str] = frozenset()
        self._read_at: float | None = None
        self._blocked: dict[str, float] = {}

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

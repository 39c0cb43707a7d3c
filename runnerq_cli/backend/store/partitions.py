"""The partition count of a queue, as stored in its control collection
(docs/design.md, "Partitions"): read at most once every PARTITIONS_REFRESH seconds per
queue handle, written only by `init-indexes --partitions N`.

An enqueue and a claim ask it for the count; a one-partition queue (no document)
answers 1 and its commands stay as they were.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from runnerq_cli.backend.domain.partitions import (
    PARTITIONS_ID,
    PARTITIONS_REFRESH,
    Rotation,
    RoundRobin,
    count_of,
)
from runnerq_cli.backend.store.driver import Collection


class PartitionCount:
    """The stored count, cached; and the cursors of the claims and enqueues of this
    handle (domain/partitions.py)."""

    def __init__(self, control: Collection,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._control = control
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._count: int | None = None
        self._read_at = 0.0
        self.claims = Rotation()
        self.enqueues = RoundRobin()

    def current(self) -> int:
        """The count (1: not partitioned); read again once PARTITIONS_REFRESH has passed.
        MalformedDocument for a stored count that is none (never cached: fixed, it is
        read at once)."""
        now = self._monotonic()
        with self._lock:
            if self._count is not None and now - self._read_at < PARTITIONS_REFRESH:
                return self._count
        count = count_of(self.read())
        with self._lock:
            self._count, self._read_at = count, now
        return count

    def read(self) -> dict[str, Any] | None:
        """The control document as stored (one read by `_id`)."""
        return self._control.find_one({"_id": PARTITIONS_ID})

    def forget(self) -> None:
        """Read the count again at the next call (after this handle changed it)."""
        with self._lock:
            self._count = None

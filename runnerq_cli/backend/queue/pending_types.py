"""The pending activity types a claim around paused types may name (docs/design.md,
"Claim order").

A worker that claims every type while some are paused cannot say `$nin` cheaply: on
the claim-order index that walks every paused entry ahead of the first claimable one,
so a long pause of a big type slows every claim. It names the types it may claim
instead (`$in`, merged per type in claim order: one key per type). Which types are
pending is found from index keys alone (queries.pending_types_beyond): the types known
so far and the paused ones are each skipped with one seek, whatever their backlog, so
a claim costs about one seek per type, never per paused activity.

The types found are kept (a drained type costs one seek of an empty range) and
forgotten every FORGET_AFTER seconds, so the list follows the types in use.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from bson.regex import Regex

from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.store.driver import Collection

FORGET_AFTER = 300.0  # seconds before the known types are found again from scratch
MOST_TYPES = 1000  # a bound on one discovery (a queue with more pending types is odd)


class PendingTypes:
    """The pending types of one queue as far as its claims know them (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._known: set[str] = set()
        self._since = clock()

    def claimable(self, activities: Collection, excluded: Iterable[str]) -> list[str]:
        """The pending types not in `excluded`, found now (new ones added to the known)."""
        paused = set(excluded)
        with self._lock:
            if self._clock() - self._since > FORGET_AFTER:
                self._known, self._since = set(), self._clock()
            known = set(self._known)
        odd: list[Any] = []  # values of malformed activities' types, stepped over
        for _ in range(MOST_TYPES):
            query = queries.pending_types_beyond(known | paused, odd)
            doc: dict[str, Any] | None = activities.find_one(
                query.filter, {"activity_type": 1, "_id": 0}, sort=query.sort_list)
            if doc is None:
                break
            found = doc.get("activity_type")
            if isinstance(found, str):
                known.add(found)
            elif found in odd or isinstance(found, Regex | re.Pattern):
                break  # a regex in $nin would match strings: stop rather than hide them
            else:  # null, missing, a number...: malformed (left pending while paused)
                odd.append(found)
        with self._lock:
            self._known |= known
        return sorted(known - paused)

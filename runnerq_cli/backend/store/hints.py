"""Hinted reads, and the count of every time a hint could not be used.

A hint names a partial index for a query the index covers (tests/test_hints.py proves
each hinted query implies its index's `partialFilterExpression`: MongoDB honours a hint
to a partial index whose filter does not cover the query and returns incomplete results,
SERVER-26413). Where the server refuses the hint (the index is missing: indexes not
created yet, or dropped), the read runs without it: the same answer, at a scan's cost.
Such a fallback is never silent: it is counted per index (`fallbacks()`, exposed by
`metrics` as `runnerq_hint_fallbacks`) and logged once per collection and process,
with the command that creates the indexes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from runnerq_cli.backend import LOGGER_NAME
from runnerq_cli.errors import CommandFailed

log = logging.getLogger(LOGGER_NAME)
T = TypeVar("T")

# Server codes that mean "this hint names no usable index" (BadValue, and 17007 of old
# servers); others also say "hint" in their message.
HINT_REFUSED = (2, 17007)

_lock = threading.Lock()
_fallbacks: dict[str, int] = {}


def refused_hint(exc: CommandFailed) -> bool:
    """True when the server refused the hint itself (not the query)."""
    return exc.code in HINT_REFUSED or "hint" in str(exc).lower()


def fallbacks() -> dict[str, int]:
    """{index name: reads this process ran without their hint}, since the process began."""
    with _lock:
        return dict(_fallbacks)


_logged: set[str] = set()  # the collections (else the indexes) logged
# The queue's collections are runnerq_{queue}_{role} (domain/naming.py).
_ROLES = ("activities", "dead_letter", "results", "idempotency", "events", "workers",
          "control", "schedules")


def _reason(exc: CommandFailed) -> str:
    """The server's message without pymongo's `full error: {...}` dump."""
    text = str(exc)
    cut = text.find(", full error")
    return (text[:cut] if cut >= 0 else text).removeprefix("MongoDB error: ")[:200]


def _fix(collection: str | None) -> str:
    """The command that creates the queue's indexes, naming the queue when known."""
    for role in _ROLES:
        if collection and collection.startswith("runnerq_") and \
                collection.endswith(f"_{role}") and len(collection) > len(role) + 9:
            queue = collection.removeprefix("runnerq_").removesuffix(f"_{role}")
            return f"runnerq-mongo --queue {queue} init-indexes"
    return "runnerq-mongo init-indexes"


def count_fallback(index: str, exc: CommandFailed, collection: str | None = None) -> None:
    """Count a read run without its refused hint; log it once per collection (one line for
    a queue whose indexes were never made, however many of its hints are refused)."""
    with _lock:
        _fallbacks[index] = _fallbacks.get(index, 0) + 1
        key = collection if collection is not None else index
        first = key not in _logged
        _logged.add(key)
    if first:
        where = f"on {collection} " if collection else ""
        log.warning("index %s %sis missing (the server refused it as a hint: %s): reading "
                    "without it, at a scan's cost; create the queue's indexes with `%s` "
                    "(counted per index in runnerq_hint_fallbacks)",
                    index, where, _reason(exc), _fix(collection))


def hinted(index: str, run: Callable[[str | None], T], collection: str | None = None) -> T:
    """`run(index)`, or `run(None)` (counted, logged once) where the server refuses the hint."""
    try:
        return run(index)
    except CommandFailed as exc:  # translated at the driver (store/driver.py)
        if not refused_hint(exc):
            raise
        count_fallback(index, exc, collection)
        return run(None)


def hinted_aggregate(collection: Any, pipeline: list[dict[str, Any]],
                     index: str) -> list[dict[str, Any]]:
    """An aggregation on `index` (a covered scan: no document read); see `hinted`."""
    def run(hint: str | None) -> list[dict[str, Any]]:
        if hint is None:
            return list(collection.aggregate(pipeline))
        return list(collection.aggregate(pipeline, hint=hint))
    return hinted(index, run, getattr(collection, "name", None))

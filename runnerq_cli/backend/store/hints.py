"""Hinted reads, and the count of every time a hint could not be used.

A hint names a partial index for a query the index covers (tests/test_hints.py proves
each hinted query implies its index's `partialFilterExpression`: MongoDB honours a hint
to a partial index whose filter does not cover the query and returns incomplete results,
SERVER-26413). Where the server refuses the hint (the index is missing: indexes not
created yet, or dropped), the read runs without it: the same answer, at a scan's cost.
Such a fallback is never silent: it is counted per index (`fallbacks()`, exposed by
`metrics` as `runnerq_hint_fallbacks`) and logged once per index and process.
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


def count_fallback(index: str, exc: CommandFailed) -> None:
    with _lock:
        first = index not in _fallbacks
        _fallbacks[index] = _fallbacks.get(index, 0) + 1
    if first:
        log.warning("index %s refused as a hint (%s): reading without it, at a scan's cost "
                    "(run init-indexes; counted in runnerq_hint_fallbacks)",
                    index, str(exc)[:200])


def hinted(index: str, run: Callable[[str | None], T]) -> T:
    """`run(index)`, or `run(None)` (counted, logged once) where the server refuses the hint."""
    try:
        return run(index)
    except CommandFailed as exc:  # translated at the driver (store/driver.py)
        if not refused_hint(exc):
            raise
        count_fallback(index, exc)
        return run(None)


def hinted_aggregate(collection: Any, pipeline: list[dict[str, Any]],
                     index: str) -> list[dict[str, Any]]:
    """An aggregation on `index` (a covered scan: no document read); see `hinted`."""
    def run(hint: str | None) -> list[dict[str, Any]]:
        if hint is None:
            return list(collection.aggregate(pipeline))
        return list(collection.aggregate(pipeline, hint=hint))
    return hinted(index, run)

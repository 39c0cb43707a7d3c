"""The bounds every `doctor` check keeps (what a check is: domain/checks.py).

The checks themselves are in server_checks.py (the server) and queue_checks.py
(one queue); diagnose.py runs them.
"""

from __future__ import annotations

from typing import Any

from runnerq_cli.backend.store.driver import Collection
from runnerq_cli.plural import counted

PENDING_AGE_WARN = 300.0  # the oldest pending activity waiting longer than this: warn
CLOCK_SKEW_WARN = 1.0  # seconds
COUNT_LIMIT = 100_000  # counts stop here ("at least N"): bounded on a queue of millions
TYPES_LIMIT = 1000  # distinct pending types looked at


def count(collection: Collection, query: dict[str, Any]) -> int:
    """An indexed count that stops at COUNT_LIMIT."""
    return int(collection.count_documents(query, limit=COUNT_LIMIT))


def at_least(n: int) -> str:
    return f"at least {n}" if n >= COUNT_LIMIT else str(n)


def activities(n: int) -> str:
    return counted(n, "activity", number=at_least(n))

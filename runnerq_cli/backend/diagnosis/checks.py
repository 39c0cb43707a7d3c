"""What a `doctor` check is, and the bounds every check keeps.

The checks themselves are in server_checks.py (the server) and queue_checks.py
(one queue); diagnose.py runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from runnerq_cli.backend.domain.models import to_jsonable
from runnerq_cli.backend.store.driver import Collection

PENDING_AGE_WARN = 300.0  # the oldest pending activity waiting longer than this: warn
CLOCK_SKEW_WARN = 1.0  # seconds
COUNT_LIMIT = 100_000  # counts stop here ("at least N"): bounded on a queue of millions
TYPES_LIMIT = 1000  # distinct pending types looked at


class CheckStatus(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    NOT_CHECKED = "not_checked"


@dataclass(frozen=True)
class Check:
    """One doctor check: what was looked at, what was found, how to fix it."""

    name: str
    status: CheckStatus
    message: str
    fix: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None  # None: a check of the server, not of one queue

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "queue": self.queue, "status": self.status.value,
                "message": self.message, "fix": self.fix, "facts": to_jsonable(self.facts)}


def failed(checks: list[Check], *, strict: bool = False) -> bool:
    """Whether the run fails: any FAIL, or with `strict` any warning too."""
    bad = {CheckStatus.FAIL, CheckStatus.WARN} if strict else {CheckStatus.FAIL}
    return any(c.status in bad for c in checks)


def count(collection: Collection, query: dict[str, Any]) -> int:
    """An indexed count that stops at COUNT_LIMIT."""
    return int(collection.count_documents(query, limit=COUNT_LIMIT))


def at_least(n: int) -> str:
    return f"at least {n}" if n >= COUNT_LIMIT else str(n)


def activities(n: int) -> str:
    return f"{at_least(n)} {'activity' if n == 1 else 'activities'}"

"""What a `doctor` check is, and whether a run of them fails: the results the CLI and the
console print, pure (the checks that read the server are in backend/diagnosis/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from runnerq_cli.backend.domain.models import to_jsonable


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

"""The report of an apply of settings kept as code (`schedule apply`, `limit apply`):
each entry's change, what changed at all, and the counts, one shape for both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACTIONS = ("create", "update", "unchanged", "remove")


@dataclass(frozen=True)
class ApplyReport:
    """The changes of one apply (each with an `action` of ACTIONS and a `to_json`), and
    whether it was a dry run."""

    changes: tuple[Any, ...]
    dry_run: bool

    @property
    def changed(self) -> bool:
        return any(c.action != "unchanged" for c in self.changes)

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "changed": self.changed,
                **{a: self.count(a) for a in ACTIONS},
                "changes": [c.to_json() for c in self.changes]}

"""Which activities an operator action by filter applies to: `ActivityFilter`.

The filter becomes a MongoDB query built from fixed field names with
equality, `$in` and range operators only. User text never lands in an
operator position and never reaches server-side JavaScript: `--error-contains`
is an escaped (`re.escape`) regular expression, so `.*`, `$where` or
`{"$gt": ""}` match themselves, literally.

`--since`/`--until` apply to `completed_at` for terminal statuses (when the
activity ended) and to `created_at` for waiting or running ones; a filter
spanning both kinds matches each status on its own field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.models import (
    TERMINAL_STATUSES,
    Status,
    check_metadata_key,
)
from runnerq_cli.errors import InvalidArgument

ERROR_CONTAINS_MAX = 1000


def check_error_contains(text: str | None) -> None:
    """An `error_contains` text: 1 to ERROR_CONTAINS_MAX characters, no NUL."""
    if text is not None and (not text or len(text) > ERROR_CONTAINS_MAX or "\x00" in text):
        raise InvalidArgument(f"error_contains: 1-{ERROR_CONTAINS_MAX} characters, no NUL",
                              "error_contains")


def error_contains_clause(text: str) -> dict[str, Any]:
    """`last_error` contains `text`, as a plain case-sensitive substring: the text is
    escaped, so no character of it is pattern syntax (and none reaches an operator)."""
    return {"$regex": re.escape(text)}


@dataclass(frozen=True)
class ActivityFilter:
    """A set of activities described by their fields (every criterion must hold)."""

    statuses: tuple[Status, ...] = ()
    types: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    error_contains: str | None = None
    worker: str | None = None

    def __post_init__(self) -> None:
        from runnerq_cli import filter_values

        object.__setattr__(self, "statuses", tuple(
            s if isinstance(s, Status) else Status.parse(s) for s in self.statuses))
        object.__setattr__(self, "types", tuple(
            str(t) for t in filter_values.filter_terms(self.types, "types")))
        for key, _ in self.metadata:
            check_metadata_key(key)
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidArgument(f"{name} must be a timezone-aware time", name)
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidArgument("since is after until: nothing can match", "since", "until")
        check_error_contains(self.error_contains)
        filter_values.filter_term(self.worker, "worker")

    @property
    def is_empty(self) -> bool:
        """True when no criterion is given (an action must not run on 'everything' by accident)."""
        return not (self.statuses or self.types or self.since or self.until or self.metadata
                    or self.error_contains or self.worker)

    def restricted_to(self, allowed: Iterable[Status]) -> ActivityFilter:
        """This filter with its statuses defaulted to `allowed` (the action's eligible ones)."""
        if self.statuses:
            return self
        return ActivityFilter(tuple(allowed), self.types, self.since, self.until,
                              self.metadata, self.error_contains, self.worker)

    def query(self) -> dict[str, Any]:
        """The MongoDB query (without `--worker`, which needs the events: see `select`)."""
        query: dict[str, Any] = {}
        statuses = [s.value for s in self.statuses]
        if statuses:
            query["status"] = statuses[0] if len(statuses) == 1 else {"$in": statuses}
        if self.types:
            query["activity_type"] = self.types[0] if len(self.types) == 1 \
                else {"$in": list(self.types)}
        for key, value in self.metadata:
            query[f"metadata.{key}"] = str(value)
        if self.error_contains is not None:
            query["last_error"] = error_contains_clause(self.error_contains)
        window = self._window()
        if window:
            terminal = [s for s in self.statuses if s in TERMINAL_STATUSES]
            waiting = [s for s in self.statuses if s not in TERMINAL_STATUSES]
            if self.statuses and not waiting:
                query["completed_at"] = window
            elif self.statuses and not terminal:
                query["created_at"] = window
            else:
                done = [s.value for s in (terminal or TERMINAL_STATUSES)]
                live = [s.value for s in (waiting or Status) if s not in TERMINAL_STATUSES]
                query["$or"] = [{"status": {"$in": done}, "completed_at": window},
                                {"status": {"$in": live}, "created_at": window}]
        return query

    def _window(self) -> dict[str, datetime]:
        window: dict[str, datetime] = {}
        if self.since is not None:
            window["$gte"] = self.since
        if self.until is not None:
            window["$lte"] = self.until
        return window

    def to_json(self) -> dict[str, Any]:
        """The criteria given, for reports and the audit record."""
        from runnerq_cli.backend.domain.models import to_jsonable

        out: dict[str, Any] = {}
        if self.statuses:
            out["status"] = [s.value for s in self.statuses]
        if self.types:
            out["type"] = list(self.types)
        if self.since is not None:
            out["since"] = to_jsonable(self.since)
        if self.until is not None:
            out["until"] = to_jsonable(self.until)
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        if self.error_contains is not None:
            out["error_contains"] = self.error_contains
        if self.worker is not None:
            out["worker"] = self.worker
        return out

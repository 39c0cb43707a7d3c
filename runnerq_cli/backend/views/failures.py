"""What is failing: failed attempts grouped by activity type and error.

The on-call question "what is failing, since when, show me one" answered by one
aggregation on the server (queries.failures_since) over the stored events of
failed attempts: `Retrying`, `Failed`, `DeadLetter`, and the reaper's `Requeued`
of an expired lease. Why events and not the activities: a retry or redrive
clears an activity's `last_error` and `completed_at`, so counting activities
forgets an incident as soon as it is retried; its events stay until the events
TTL (`events_ttl`, 7 days by default). A success stores no event, so the read
is O(failed attempts in the window), not O(work done).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli.backend.domain.models import to_jsonable
from runnerq_cli.backend.domain.queries import failures_since
from runnerq_cli.backend.store.context import QueueContext

DEFAULT_LIMIT = 20


@dataclass(frozen=True)
class FailureGroup:
    """The failed attempts of one activity type with one error."""

    activity_type: str
    error: str
    count: int  # failed attempts: the four below added up
    retrying: int  # failed, will run again (`Retrying`)
    failed: int  # failed, non-retryable (`Failed`): terminal
    dead_letter: int  # failed with no attempt left (`DeadLetter`): terminal
    lease_expired: int  # the worker died or hung (the reaper's `Requeued`)
    first_seen: datetime | None
    last_seen: datetime | None
    example_id: uuid.UUID | None  # the activity of the newest one

    def to_json(self) -> dict[str, Any]:
        """JSON form (docs/reference.md, "Failures JSON"): `example_id` is an activity id."""
        return {name: to_jsonable(getattr(self, name)) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Failures:
    """The groups (most attempts first), and how many there were before `limit`."""

    since: datetime
    groups: list[FailureGroup]
    total_groups: int

    @property
    def attempts(self) -> int:
        """Failed attempts in the groups shown."""
        return sum(group.count for group in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {"since": to_jsonable(self.since), "total_groups": self.total_groups,
                "groups": [group.to_json() for group in self.groups]}


def _int(row: dict[str, Any], name: str) -> int:
    value = row.get(name)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _date(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def group_failures(ctx: QueueContext, since: datetime | timedelta | None = None,
                   limit: int = DEFAULT_LIMIT) -> Failures:
    """Failed attempts since `since` (a time, or how long ago; None: every event kept),
    grouped by type and error, the `limit` largest groups first."""
    from runnerq_cli.errors import InvalidArgument

    if limit < 1:
        raise InvalidArgument("limit must be at least 1")
    now = ctx.clock()
    if since is None:
        start = now - timedelta(seconds=ctx.settings.events_ttl)
    elif isinstance(since, timedelta):
        start = now - since
    else:
        start = since
    query = failures_since(start)
    rows = list(ctx.events.aggregate(list(query.pipeline or ())))
    groups = []
    for row in rows[:limit]:
        found = row.get("_id")
        key: dict[str, Any] = found if isinstance(found, dict) else {}
        error = key.get("error")
        example = row.get("example_id")
        groups.append(FailureGroup(
            activity_type=str(key.get("type")), error=error if isinstance(error, str) else
            str(error), count=_int(row, "count"), retrying=_int(row, "retrying"),
            failed=_int(row, "failed"), dead_letter=_int(row, "dead_letter"),
            lease_expired=_int(row, "lease_expired"), first_seen=_date(row.get("first_seen")),
            last_seen=_date(row.get("last_seen")),
            example_id=example if isinstance(example, uuid.UUID) else None))
    return Failures(start, groups, len(rows))

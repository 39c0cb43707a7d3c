"""Schedules as the queue's other views show them: stats, queues, metrics, explain, doctor.

docs/design.md, "Schedules". Every view here is computed from `Schedules.list_schedules()`
(one read of the schedules collection and one of the last fires' activities), or for
`explain` one read of the activity's own schedule, so a scrape or a `stats` refresh costs
the same two queries whatever the number of schedules. Plain data only: the CLI and the
console print it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.models import META_FIRE, META_FIRE_AT, META_SCHEDULE
from runnerq_cli.backend.domain.schedules import Schedule, iso
from runnerq_cli.backend.ops.schedules import ScheduleInfo, Schedules
from runnerq_cli.backend.store.context import QueueContext


def summary(infos: Iterable[ScheduleInfo], now: datetime) -> dict[str, Any]:
    """The queue's schedules in a few numbers (`stats`, `queues`): how many, paused,
    malformed, ended, overdue past their grace (`late`: no firer running), the missed
    fires counted so far, and the next fire of all (name, instant, seconds from now)."""
    infos = list(infos)
    coming = [(i.next_fire_at, i.name) for i in infos
              if i.problem is None and not i.paused and i.next_fire_at is not None]
    first = min(coming) if coming else None
    return {
        "count": len(infos),
        "paused": sum(1 for i in infos if i.paused),
        "problems": sum(1 for i in infos if i.problem is not None),
        "ended": sum(1 for i in infos if i.ended),
        "late": sum(1 for i in infos if i.late_by(now) is not None),
        "missed_fires": sum(i.schedule.missed_fires for i in infos if i.schedule),
        "next_fire": None if first is None else {
            "name": first[1], "at": iso(first[0]),
            "in_seconds": (first[0] - now).total_seconds()},
    }


def _timestamp(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def series(infos: Iterable[ScheduleInfo]) -> list[dict[str, Any]]:
    """One row per schedule for Prometheus: paused, malformed, next and last fire times
    (Unix seconds, None when there is none), and the fire counters."""
    out = []
    for info in infos:
        s = info.schedule
        last = info.last_fire
        out.append({
            "name": info.name, "paused": info.paused, "problem": info.problem is not None,
            "next_fire_timestamp": _timestamp(info.next_fire_at) if info.problem is None
            else None,
            "last_fire_timestamp": _timestamp(last.at) if last is not None else None,
            "fires": s.fires if s else 0, "missed_fires": s.missed_fires if s else 0,
            "skipped_fires": s.skipped_fires if s else 0,
            "buffered": bool(s and s.buffered is not None)})
    return out


def origin(ctx: QueueContext, metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The schedule an activity came from (`explain`), from its metadata and one read of
    that schedule; None when the activity was not fired by a schedule. `state` is
    `active`, `paused`, `ended`, `malformed` or `removed` (no schedule of that name now)."""
    name = (metadata or {}).get(META_SCHEDULE)
    if not isinstance(name, str):
        return None
    out: dict[str, Any] = {"name": name, "fire_at": (metadata or {}).get(META_FIRE_AT),
                           "fire": (metadata or {}).get(META_FIRE), "state": "removed",
                           "next_fire_at": None, "problem": None}
    doc = ctx.collection("schedules").find_one({"_id": name})
    if doc is None:
        return out
    schedule, problem = Schedule.from_doc(doc)
    stored = doc.get("problem")
    problem = stored if isinstance(stored, str) else problem
    if schedule is None or problem is not None:
        out.update(state="malformed", problem=problem)
        return out
    out["next_fire_at"] = schedule.next_fire_at
    out["state"] = ("paused" if schedule.paused
                    else "ended" if schedule.next_fire_at is None else "active")
    if schedule.paused:
        out["pause_reason"] = schedule.pause_reason
    return out


def origin_sentence(facts: Mapping[str, Any]) -> str:
    """`explain`'s words for an activity's schedule (its values as stored: the CLI
    shows the whole sentence as inert text)."""
    from runnerq_cli.backend.domain.models import display_time

    fire = {"on_time": "on time", "catchup": "late (catch-up)",
            "trigger": "by a trigger"}.get(str(facts.get("fire")), str(facts.get("fire")))
    head = f"It was fired by schedule {facts['name']} ({fire}, for {facts.get('fire_at')})"
    state = facts["state"]
    if state == "removed":
        return head + "; that schedule has been removed since."
    if state == "malformed":
        return head + f"; that schedule is set aside as malformed: {facts.get('problem')}."
    if state == "paused":
        return head + "; that schedule is paused."
    if state == "ended":
        return head + "; that schedule never fires again (past its end)."
    return head + f"; its next fire is at {display_time(facts.get('next_fire_at'))}."


class ScheduleViews:
    """`rq.schedule_views`: the functions above over this queue's schedules, each one
    `list_schedules()` (two reads), by the server's clock as the process knows it."""

    def __init__(self, ctx: QueueContext, schedules: Schedules) -> None:
        self._ctx = ctx
        self._schedules = schedules

    def infos(self) -> list[ScheduleInfo]:
        return self._schedules.list_schedules()

    def summary(self, infos: list[ScheduleInfo] | None = None) -> dict[str, Any]:
        return summary(self.infos() if infos is None else infos, self._ctx.clock())

    def series(self) -> list[dict[str, Any]]:
        return series(self.infos())

    def origin(self, metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return origin(self._ctx, metadata)

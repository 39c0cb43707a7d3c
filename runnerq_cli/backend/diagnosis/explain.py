"""`explain ID`: why an activity is where it is, in a sentence, with the facts behind it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_cli.backend.diagnosis.checks import at_least, count
from runnerq_cli.backend.domain.documents import Activity
from runnerq_cli.backend.domain.models import (
    WAITING_STATUSES,
    MalformedDocument,
    Priority,
    Status,
    parse_activity_id,
    to_jsonable,
)
from runnerq_cli.backend.domain.partitions import term as partition_term
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.backend.domain.rules import attempts_remain
from runnerq_cli.backend.domain.sizes import ACTIVITY_TYPE_MAX
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.backend.queue.workers import WorkerInfo, WorkerRegistry
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.discovery import discover_queues
from runnerq_cli.errors import NotFound
from runnerq_cli.plural import agreeing, counted


def _handles(worker: WorkerInfo, activity_type: str) -> bool:
    return not worker.types or activity_type in worker.types


@dataclass(frozen=True)
class Explanation:
    """Why an activity is where it is: a sentence, and the facts behind it."""

    activity_id: uuid.UUID
    queue: str
    status: str
    reason: str  # scheduled | backing_off | held | lease_expired | pending | held_back |
    # malformed |
    # <terminal status>
    sentence: str
    facts: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"activity_id": str(self.activity_id), "queue": self.queue,
                "status": self.status, "reason": self.reason, "sentence": self.sentence,
                "facts": to_jsonable(self.facts)}


def _in(seconds: float) -> str:
    from runnerq_cli.times import format_duration

    return format_duration(abs(seconds))


def _when(value: datetime | None) -> str:
    from runnerq_cli.backend.domain.models import display_time

    return display_time(value)



def _ahead(ctx: QueueContext, priority: int, created_at: datetime,
           partition: int | None = None) -> dict[str, int]:
    """Pending activities claimed before this one, by priority (claim order, indexed counts;
    in a partitioned queue, of its own partition: order holds within one)."""
    out: dict[str, int] = {}
    base = {"status": Status.PENDING.value, **partition_term(partition)}
    for p in sorted((int(x) for x in Priority), reverse=True):
        if p > priority:
            n = count(ctx.activities, {**base, "priority": p})
        elif p == priority:
            n = count(ctx.activities,
                      {**base, "priority": p, "created_at": {"$lt": created_at}})
        else:
            continue
        if n:
            out[Priority.label(p)] = n
    return out


def _explain_scheduled(act: Activity, now: datetime, live: list[WorkerInfo],
                       facts: dict[str, Any]) -> tuple[str, str]:
    """Delayed at enqueue, or backing off after a failed attempt: until when."""
    due = act.scheduled_at
    wait = (due - now).total_seconds() if due else 0.0
    facts.update(scheduled_at=due, due_in_seconds=round(wait, 3))
    timing = (f"due at {_when(due)} (in {_in(wait)})" if wait > 0 else
              f"due since {_when(due)} ({_in(wait)} ago): the scheduler makes it pending "
              + ("within a poll interval" if live else "once a worker runs (none is live)"))
    if act.retry_count > 0:
        reason = "backing_off"
        sentence = (f"Backing off after attempt {act.retry_count} "
                    f"({act.last_error or 'no error recorded'}); {timing}.")
    else:
        reason = "scheduled"
        sentence = (f"Scheduled for {_when(due)} (in {_in(wait)})." if wait > 0
                    else f"Scheduled: {timing}.")
    return reason, sentence


def _explain_running(act: Activity, now: datetime, workers: list[WorkerInfo],
                     live: list[WorkerInfo], facts: dict[str, Any]) -> tuple[str, str]:
    """Held under a live lease, or past it: who reaps it, and when."""
    deadline = act.lease_deadline
    holder = next((w for w in workers if w.worker_id == act.worker_id), None)
    facts.update(worker_id=act.worker_id, lease_deadline=deadline, started_at=act.started_at,
                 worker_registered=holder is not None,
                 worker_stale=holder.stale if holder else None)
    if deadline is not None and deadline > now:
        reason = "held"
        sentence = (f"Running: held by worker {act.worker_id} whose lease is live until "
                    f"{_when(deadline)} (in {_in((deadline - now).total_seconds())}).")
        if holder is not None and holder.stale:
            sentence += " That worker has stopped heartbeating: the lease will expire."
    else:
        reason = "lease_expired"
        retry = attempts_remain(act.retry_count, act.max_retries)
        limit = act.max_retries or "unlimited"
        then = (f"requeue it (attempt {act.retry_count + 2} of {limit})" if retry
                else "dead-letter it (no attempts left)")
        facts.update(reaper_will=("requeue" if retry else "dead_letter"))
        if live:
            whose = agreeing(len(live), "the live worker",
                             f"one of the {counted(len(live), 'live worker')}")
            reap = f"the reaper of {whose} will {then} within about 15 s"
        else:
            reap = f"no worker is alive to run the reaper; the first one started will {then}"
        ago = _in((now - deadline).total_seconds()) if deadline else "?"
        sentence = (f"Held by worker {act.worker_id} whose lease expired at "
                    f"{_when(deadline)} ({ago} ago): {reap}.")
    return reason, sentence


def _explain_pending(ctx: QueueContext, act: Activity, live: list[WorkerInfo],
                     facts: dict[str, Any]) -> tuple[str, str]:
    """Its place in claim order, and which live workers handle its type."""
    reason = "pending"
    ahead = _ahead(ctx, act.priority, act.created_at, act.partition)
    handlers = [w.worker_id for w in live if _handles(w, act.activity_type)]
    facts.update(ahead=sum(ahead.values()), ahead_by_priority=ahead,
                 handled_by=handlers[:50])
    order = "claim order" if act.partition is None else \
        f"its partition's claim order (partition {act.partition})"
    if act.partition is not None:
        facts["partition"] = act.partition
    total = sum(ahead.values())
    place = (f"{at_least(total)} ahead of it in {order} ("
             + ", ".join(f"{n} {p}" for p, n in ahead.items()) + ")") if total \
        else f"first in {order}"
    verb = agreeing(len(handlers), "handles", "handle")
    who = (f"{counted(len(handlers), 'live worker')} {verb} {act.activity_type} "
           f"({', '.join(handlers[:3])}{', ...' if len(handlers) > 3 else ''})"
           if handlers else f"no live worker handles {act.activity_type}")
    sentence = f"Pending ({Priority.label(act.priority)} priority): {place}; {who}."
    return reason, sentence


def _explain_waiting(ctx: Any, act: Activity, facts: dict[str, Any]) -> tuple[str, str]:
    """What a parked durable activity waits for, and until when (views/trees.py)."""
    from runnerq_cli.backend.views.trees import Trees

    wait = Trees(ctx).wait({**act.extra, "status": act.status,
                            "scheduled_at": act.scheduled_at})
    if wait is None:
        return "waiting", "Waiting."
    facts["waiting"] = wait.to_json()
    text = wait.describe(_when)
    return "waiting", text[0].upper() + text[1:] + "."


def _held_back(ctx: QueueContext, act: Activity, now: datetime) -> str | None:
    """Why a limit keeps a pending activity from starting now (docs/design.md, "Flow
    control"), or None: not limited, or its limits would let it start."""
    from runnerq_cli.backend.domain.flow import NO_KEY, verdict

    doc = ctx.limits.find_one({"_id": act.activity_type})
    if doc is None:
        return None
    key = act.extra.get("flow_key")
    return verdict(doc, key if isinstance(key, str) else NO_KEY, now).reason


def _explain_finished(act: Activity, facts: dict[str, Any]) -> tuple[str, str]:
    """How and when it ended."""
    reason = act.status
    ended = act.completed_at
    facts.update(completed_at=ended)
    # The sentence ends with one full stop, also after an error that ends with its own.
    error = f": {act.last_error.rstrip().removesuffix('.')}" if act.last_error else ""
    retries = f" after {counted(act.retry_count, 'retry')}" if act.retry_count else ""
    sentence = {
        Status.COMPLETED.value: f"Completed at {_when(ended)}{retries}.",
        Status.FAILED.value: f"Failed (non-retryable) at {_when(ended)}{error}.",
        Status.DEAD_LETTER.value: (f"Dead-lettered at {_when(ended)} after attempt "
                                   f"{act.retry_count + 1}{error}."),
        Status.CANCELLED.value: f"Cancelled by an operator at {_when(ended)}.",
    }.get(act.status, f"In status {act.status!r}.")
    return reason, sentence


_MALFORMED_FATE = {
    Status.PENDING.value: "the first worker that claims it dead-letters it at once",
    Status.SCHEDULED.value: "once due, the first worker that claims it dead-letters it",
    Status.PROCESSING.value: "the reaper dead-letters it when its lease expires",
    Status.DEAD_LETTER.value: "it was dead-lettered",
}


def _claimable_type(kind: Any) -> bool:
    """Whether a claim by type can match this `activity_type`: text a handler's type can
    be (1 to ACTIVITY_TYPE_MAX characters; an empty one names no handler), or (another
    program's) list holding such text, which `$in` matches element by element."""
    def named(item: Any) -> bool:
        return isinstance(item, str) and 1 <= len(item) <= ACTIVITY_TYPE_MAX

    return named(kind) or (isinstance(kind, list) and any(named(item) for item in kind))


class Explainer:
    """Explanations of one queue's activities, given what they read; `other(queue)` is
    the explainer of another queue of the database (an id may be in any of them)."""

    def __init__(self, ctx: QueueContext, registry: WorkerRegistry,
                 get_activity: Callable[[uuid.UUID], Activity],
                 paused: Callable[[], PauseState],
                 other: Callable[[str], Explainer]) -> None:
        self._ctx = ctx
        self._registry = registry
        self._get_activity = get_activity
        self._paused = paused
        self._other = other

    def locate(self, activity_id: uuid.UUID) -> Explainer:
        """The explainer of the queue holding the activity: this one, else the first other
        queue of the database that has it (one `_id` look-up per queue); NotFound otherwise."""
        if self._ctx.activities.count_documents({"_id": activity_id}, limit=1):
            return self
        for name in discover_queues(self._ctx.db):
            if name != self._ctx.settings.queue:
                other = self._other(name)
                if other._ctx.activities.count_documents({"_id": activity_id}, limit=1):
                    return other
        raise NotFound(f"activity {activity_id} not found (in any queue of database "
                       f"{self._ctx.settings.database!r})")

    def _malformed(self, aid: uuid.UUID, problem: str) -> Explanation:
        """An activity whose document readers refuse (docs/design.md, "Malformed documents"):
        what is wrong, what the queue does with it, and the fix."""
        doc = self._ctx.activities.find_one(
            {"_id": aid}, {"status": 1, "last_error": 1, "activity_type": 1}) or {}
        status = str(doc["status"]) if isinstance(doc.get("status"), str) else "?"
        kind = doc.get("activity_type")
        if status in WAITING_STATUSES and not _claimable_type(kind):
            # Workers claim by type (`activity_type: {$in: [...]}`): no handler's type
            # matches a missing, null or numeric one, so nothing ever takes it to set it
            # aside; it waits until someone gives it a type or deletes it.
            due = "once due the scheduler makes it pending, but " \
                if status == Status.SCHEDULED.value else ""
            sentence = (f"Its document is malformed ({problem}): {due}no worker claims it, "
                        "since workers claim by activity type and it has none, so it stays "
                        f"{'pending' if due else status} (doctor's documents check names "
                        "it). Set its activity_type to a type a worker handles, as "
                        "docs/design.md (\"Activity document\") says, or delete it; the "
                        "program that wrote it has a bug.")
        else:
            fate = _MALFORMED_FATE.get(status, f"in status {status!r}, no worker claims it")
            sentence = (f"Its document is malformed ({problem}): no worker runs it; {fate}. "
                        "Correct the field as docs/design.md (\"Activity document\") says "
                        "and retry it, or delete it; the program that wrote it has a bug.")
        return Explanation(aid, self._ctx.settings.queue, status, "malformed", sentence,
                           {"problem": problem, "last_error": doc.get("last_error")})

    def pause_of(self, activity_type: str | None = None) -> dict[str, Any] | None:
        """The pause that stops claims (of `activity_type`, when given), or None."""
        state = self._paused()
        if not state.active:
            return None
        if activity_type is not None and not state.all and activity_type not in state.types:
            return None
        return state.to_json()

    def explain(self, activity_id: uuid.UUID | str, *, any_queue: bool = False) -> Explanation:
        """Why the activity is not running (or how it ended); NotFound if there is none.

        With `any_queue`, an activity not in this queue is looked for in the others.
        """
        aid = parse_activity_id(activity_id)
        if any_queue:
            return self.locate(aid).explain(aid)
        ctx = self._ctx
        queue = ctx.settings.queue
        try:
            act = self._get_activity(aid)
        except MalformedDocument as exc:
            return self._malformed(aid, exc.problem)
        now = ctx.clock()
        workers = self._registry.list_workers(TIMING.worker_stale_after)
        live = [w for w in workers if not w.stale]
        pause = self.pause_of(act.activity_type)
        facts: dict[str, Any] = {
            "activity_type": act.activity_type, "priority": Priority.label(act.priority),
            "attempt": act.retry_count + 1, "max_retries": act.max_retries,
            "created_at": act.created_at, "last_error": act.last_error,
            "live_workers": len(live), "paused": pause is not None}
        status = act.status
        if status == Status.SCHEDULED.value:
            reason, sentence = _explain_scheduled(act, now, live, facts)
        elif status == Status.PROCESSING.value:
            reason, sentence = _explain_running(act, now, workers, live, facts)
        elif status == Status.PENDING.value:
            reason, sentence = _explain_pending(ctx, act, live, facts)
        elif status == Status.WAITING.value:
            reason, sentence = _explain_waiting(ctx, act, facts)
        else:
            reason, sentence = _explain_finished(act, facts)
        if pause is not None and status in WAITING_STATUSES:
            facts["pause"] = pause
            what = f"queue {queue}" if pause.get("all") else f"type {act.activity_type}"
            sentence += f" Its {what} is paused: nothing is claimed until it is resumed."
        if status == Status.PENDING.value:
            held = _held_back(ctx, act, now)  # one read: the type's limit document
            if held is not None:
                reason = "held_back"
                facts["held_back"] = held
                sentence += f" Held back by a flow limit: {held}."
        from runnerq_cli.backend.ops.schedule_views import origin, origin_sentence

        fired_by = origin(ctx, act.metadata)  # one read, only for a fired activity
        if fired_by is not None:
            facts["schedule"] = fired_by
            sentence += " " + origin_sentence(fired_by)
        return Explanation(aid, queue, status, reason, sentence, facts)

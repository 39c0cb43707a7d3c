"""Operator actions of docs/design.md ("Operator actions"): cancel, retry, redrive, run now,
reschedule, priority, purge, and our `delete` (terminal activities only).

Each action on one activity is one atomic, conditional `findOneAndUpdate` of
the activity document: the filter names the statuses the action applies to,
so an action never overwrites a change made meanwhile by a worker, the reaper
or another operator. Its event (`Cancelled`, `Retried`, ...) travels in the
same update through the outbox (see `writes.py`), like every queue operation.

Running (`processing`) activities are refused by every action: a worker holds
the lease and would overwrite or race the operator's change. Stop the worker
or wait for the attempt to end (a cancelled-while-running state would need
the worker to poll for it, which the data contract does not define).

Wrong status -> `WrongState` (exit 9), unknown id -> `NotFound`,
malformed id or value -> `InvalidArgument`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo import DeleteOne, ReturnDocument

from runnerq_cli.backend.audit import AuditLog
from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.derived import attempt_events
from runnerq_cli.backend.filters import check_error_contains, error_contains_clause
from runnerq_cli.backend.maintenance import Maintenance
from runnerq_cli.backend.models import (
    EventType,
    Priority,
    Status,
    parse_activity_id,
    to_jsonable,
)
from runnerq_cli.backend.writes import merge_updates, new_event, outbox_update
from runnerq_cli.errors import InvalidArgument, NotFound, WrongState

OPERATOR = "operator"  # the worker_id recorded on operator events
CANCELLABLE = (Status.PENDING, Status.SCHEDULED)
RETRYABLE = (Status.FAILED, Status.DEAD_LETTER, Status.CANCELLED)
WAITING = (Status.PENDING, Status.SCHEDULED)
# What a retry or redrive clears: the outcome of the previous run. The lease
# fields are already absent on a terminal activity; `last_lease_id` goes too,
# so a late repeat ack of the old claim is answered "claim lost", not replayed.
RESTART_UNSET = {"completed_at": "", "last_outcome": "", "last_lease_id": "",
                 "scheduled_at": "", "started_at": "", "outbox.dead_letter": "",
                 "outbox.result": ""}
PURGE_BATCH = 1000
TERMINAL = (Status.COMPLETED, Status.FAILED, Status.DEAD_LETTER, Status.CANCELLED)
# Which statuses each action applies to (an action by filter selects only these).
ACTION_STATUSES: dict[str, tuple[Status, ...]] = {
    "cancel": CANCELLABLE, "retry": RETRYABLE, "run-now": (Status.SCHEDULED,),
    "reschedule": WAITING, "set-priority": WAITING, "delete": TERMINAL,
}
# What an action by filter expects to be unchanged since the operator saw it.
EXPECT_FIELDS = ("status", "retry_count", "priority", "completed_at")
SNAPSHOT_FIELDS = {"activity_type": 1, "status": 1, "completed_at": 1, "retry_count": 1,
                   "priority": 1, "created_at": 1, "last_error": 1}
Expect = dict[str, Any] | None


@dataclass(frozen=True)
class ActionResult:
    """What one action did to one activity."""

    action: str
    activity_id: uuid.UUID
    activity_type: str
    previous_status: str
    status: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "id": str(self.activity_id), "ok": True,
                "activity_type": self.activity_type, "previous_status": self.previous_status,
                "status": self.status, "detail": to_jsonable(self.detail)}


@dataclass
class RedriveReport:
    """The dead-lettered activities a redrive moved (or, dry run, would move)."""

    dry_run: bool
    activities: list[dict[str, Any]]
    stale_records: int  # dead-letter records whose activity is no longer dead_letter
    interrupted: bool = False  # stopped between batches by a signal
    last_id: uuid.UUID | None = None

    @property
    def count(self) -> int:
        return len(self.activities)

    def to_json(self) -> dict[str, Any]:
        return {"action": "redrive", "dry_run": self.dry_run, "count": self.count,
                "activities": to_jsonable(self.activities),
                "stale_records": self.stale_records, "interrupted": self.interrupted,
                "last_id": str(self.last_id) if self.last_id else None}


class Operator:
    """Operator actions on one queue (mixed into `RunnerQ`)."""

    def __init__(self, ctx: QueueContext, maintenance: Maintenance, audit: AuditLog) -> None:
        self._ctx = ctx
        self._maintenance = maintenance
        self._audit = audit

    # ------------------------------------------------------------- one activity
    # Each takes `reason` and `actor` (recorded in its event's detail) and
    # `expect`: field values the activity must still have (what an operator was
    # shown); if it changed since, `Changed` is raised and nothing is written.

    def cancel(self, activity_id: uuid.UUID | str, reason: str | None = None,
               actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """pending or scheduled -> cancelled (terminal; retention counts from completed_at).

        A running activity is refused: its worker holds the lease.
        """
        return self._planned("cancel", activity_id, {}, reason, actor, expect)

    def retry(self, activity_id: uuid.UUID | str, reason: str | None = None,
              actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """failed, dead_letter or cancelled -> pending, as a fresh start (retry_count 0).

        Clears completed_at and the previous outcome. For a dead-lettered
        activity the dead-letter record is removed after the activity update
        (see `_drop_dead_letter_record` for why in that order).
        """
        result, before = self._act_with_before(
            "retry", activity_id, RETRYABLE, EventType.RETRIED,
            lambda doc, now: plan_state("retry", doc, now, {}),
            lambda doc: plan_detail("retry", doc, {}), note=_note(reason, actor),
            expect=expect)
        if before["status"] == Status.DEAD_LETTER.value:
            self.drop_dead_letter_record(before)
        return result

    def run_now(self, activity_id: uuid.UUID | str, reason: str | None = None,
                actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """scheduled -> pending now (skips a delay or a retry back-off)."""
        return self._planned("run-now", activity_id, {}, reason, actor, expect)

    def reschedule(self, activity_id: uuid.UUID | str, at: datetime,
                   reason: str | None = None, actor: str | None = None, *,
                   expect: Expect = None) -> ActionResult:
        """pending or scheduled -> scheduled at `at` (timezone-aware, in the future)."""
        return self._planned("reschedule", activity_id, {"at": self.future_time(at)}, reason,
                             actor, expect)

    def future_time(self, at: datetime) -> datetime:
        if not isinstance(at, datetime) or at.tzinfo is None:
            raise InvalidArgument("the time to run at must be timezone-aware")
        at = at.replace(microsecond=at.microsecond // 1000 * 1000)
        if at <= self._ctx.clock():
            raise InvalidArgument(f"{to_jsonable(at)} is not in the future; use run-now to "
                                  "run it now")
        return at

    def set_priority(self, activity_id: uuid.UUID | str, priority: Priority | int | str,
                     reason: str | None = None, actor: str | None = None, *,
                     expect: Expect = None) -> ActionResult:
        """pending or scheduled -> the new priority (the event has the old and the new)."""
        return self._planned("set-priority", activity_id, {"priority": Priority.parse(priority)},
                             reason, actor, expect)

    def _planned(self, action: str, activity_id: uuid.UUID | str, params: dict[str, Any],
                 reason: str | None, actor: str | None, expect: Expect) -> ActionResult:
        """One activity through the action's plan (`plan_state`, `plan_detail`)."""
        return self._act(action, activity_id, PLAN_STATUSES[action], ACTION_EVENTS[action],
                         lambda doc, now: plan_state(action, doc, now, params),
                         lambda doc: plan_detail(action, doc, params),
                         note=_note(reason, actor), expect=expect)

    def delete(self, activity_id: uuid.UUID | str, reason: str | None = None,
               actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """Remove a terminal activity with its result, events, dead-letter record and key.

        No event can outlive the activity, so a delete is recorded only in the
        audit (see `audit.py`; `apply` writes it). The activity document goes
        first (the commit point, conditional on the status and `completed_at`
        it was read with), the rest after it: a crash in between leaves orphan
        results and events, which their TTL indexes remove. The dead-letter
        record goes before the activity, conditional on its `failed_at`:
        whatever changes a dead-lettered activity meanwhile (retry, redrive)
        drops that record anyway.
        """
        aid = parse_activity_id(activity_id)
        allowed = [s.value for s in TERMINAL]
        for _ in range(5):
            before = self._ctx.activities.find_one({"_id": aid}, SNAPSHOT_FIELDS)
            if before is None:
                raise NotFound(f"activity {aid} not found")
            status = str(before.get("status"))
            _check(before, "delete", aid, allowed, expect)
            if status == Status.DEAD_LETTER.value:
                self.drop_dead_letter_record(before)
            gone = self._ctx.activities.delete_one(
                {"_id": aid, "status": status, "completed_at": before.get("completed_at")})
            if not gone.deleted_count:
                continue  # changed meanwhile: look again
            self._ctx.results.delete_one({"_id": aid})
            self._ctx.events.delete_many({"activity_id": aid})
            self._ctx.idempotency.delete_many({"activity_id": aid})
            return ActionResult("delete", aid, str(before.get("activity_type")), status,
                                "deleted", {k: v for k, v in _note(reason, actor).items()
                                            if v is not None})
        raise WrongState(f"delete {aid}: the activity keeps changing; try again")

    # ------------------------------------------------------------------- bulk

    def redrive(self, types: Iterable[str] | None = None, *, dry_run: bool = False,
                ids: Iterable[uuid.UUID | str] | None = None,
                limit: int | None = None, reason: str | None = None,
                actor: str | None = None, should_stop: Callable[[], bool] | None = None,
                on_batch: Callable[[int], None] | None = None,
                command: str | None = None,
                error_contains: str | None = None) -> RedriveReport:
        """Every dead-lettered activity (of `types`, if given; whose last error contains
        `error_contains`, if given) back to pending.

        The activity documents are the truth (status dead_letter), not the
        dead-letter collection: an activity whose record was never written
        (outbox not flushed yet) is redriven too. Each activity is its own
        conditional update, so a concurrent retry of one of them is not
        done twice. `ids` limits it to those activities (what a preview
        showed and the operator confirmed). Records left by an interrupted retry or redrive (their
        activity is no longer dead_letter) are removed as well.

        Batched (batches.py) and audited before acting, like `BulkActions.apply`;
        `should_stop` is asked between batches.
        """
        from runnerq_cli.backend.batches import BATCH_SIZE, Batches

        type_list = [t for t in (types or ()) if t]
        query: dict[str, Any] = {"status": Status.DEAD_LETTER.value}
        if type_list:
            query["activity_type"] = {"$in": type_list}
        if ids is not None:
            query["_id"] = {"$in": [parse_activity_id(i) for i in ids]}
        if error_contains is not None:
            check_error_contains(error_contains)
            query["last_error"] = error_contains_clause(error_contains)
        projection = {"activity_type": 1, "retry_count": 1, "completed_at": 1, "last_error": 1}
        cursor = self._ctx.activities.find(query, projection).sort([("completed_at", 1)])
        if limit is not None:
            cursor = cursor.limit(limit)
        found = list(cursor.batch_size(2000))
        summaries = {doc["_id"]: {"id": doc["_id"], "activity_type": doc.get("activity_type"),
                                  "retry_count": doc.get("retry_count", 0),
                                  "dead_lettered_at": doc.get("completed_at"),
                                  "last_error": doc.get("last_error")} for doc in found}
        stale = self._stale_dead_letter_records(type_list)
        if dry_run:
            return RedriveReport(True, list(summaries.values()), len(stale))
        moved: list[dict[str, Any]] = []
        report = RedriveReport(False, moved, len(stale))
        if not found and not stale:
            return report
        run = self._audit.begin("redrive", reason=reason, actor=actor,
                                types=type_list or None, selected=len(found), command=command)
        note = _note(reason, actor or run.doc["detail"]["actor"])
        batches = Batches(self._ctx)
        order = [doc["_id"] for doc in found]
        with run:
            for start in range(0, len(order), BATCH_SIZE):
                if should_stop is not None and should_stop():
                    report.interrupted = True
                    break
                chunk = order[start:start + BATCH_SIZE]
                done = batches.run("redrive", chunk, note=note)
                moved.extend(summaries[r.activity_id] for r in done.applied)
                report.last_id = chunk[-1]
                run.progress([r.activity_id for r in done.applied], last_id=str(chunk[-1]),
                             redriven=len(moved))
                if on_batch is not None:
                    on_batch(len(moved))
            if stale and not report.interrupted:
                self._ctx.dead_letter.bulk_write(
                    [DeleteOne({"_id": r["_id"], "failed_at": r.get("failed_at")})
                     for r in stale], ordered=False)
            run.finish("interrupted" if report.interrupted else "done", redriven=len(moved),
                       stale_records_removed=0 if report.interrupted else len(stale),
                       last_id=str(report.last_id) if report.last_id else None)
        return report

    def redrive_one(self, aid: uuid.UUID, *, reason: str | None = None,
                     actor: str | None = None) -> dict[str, Any] | None:
        now = self._ctx.clock()
        before = self._ctx.activities.find_one({"_id": aid}, {"outbox": 0, "payload": 0})
        if before is None or before.get("status") != Status.DEAD_LETTER.value:
            return None
        event = new_event(aid, before.get("activity_type"), EventType.REDRIVEN.value, now,
                          OPERATOR, previous_status=before["status"],
                          previous_retry_count=before.get("retry_count", 0),
                          **_note(reason, actor))
        state: dict[str, dict[str, Any]] = {
            "$set": {"status": Status.PENDING.value, "retry_count": 0},
            "$unset": dict(RESTART_UNSET)}
        update = merge_updates(state, outbox_update(now, _kept_steps(before, state, event)))
        changed = self._ctx.activities.find_one_and_update(
            {"_id": aid, "status": Status.DEAD_LETTER.value}, update,
            return_document=ReturnDocument.AFTER)
        if changed is None:
            return None
        self._ctx.outbox.submit(changed)
        return before

    def _stale_dead_letter_records(self, types: list[str]) -> list[dict[str, Any]]:
        """Dead-letter records whose activity was retried or redriven since.

        A record whose activity is gone (aged out by retention) is not stale:
        docs/design.md ("Dead-letter records") keeps them until an operator acts on them.
        """
        query: dict[str, Any] = {}
        if types:
            query["activity.activity_type"] = {"$in": types}
        records = list(self._ctx.dead_letter.find(query, {"_id": 1, "failed_at": 1}))
        if not records:
            return []
        moved_on = {d["_id"] for d in self._ctx.activities.find(
            {"_id": {"$in": [r["_id"] for r in records]},
             "status": {"$ne": Status.DEAD_LETTER.value}}, {"_id": 1})}
        return [r for r in records if r["_id"] in moved_on]

    def drop_dead_letter_record(self, before: dict[str, Any]) -> None:
        """Remove the dead-letter record of an activity that was just retried or redriven.

        Ordering: the activity update (the commit point) comes first, this
        delete second. A crash in between leaves a record whose activity is no
        longer dead_letter; `redrive` removes such stale records. The delete is
        conditional on the record's `failed_at` being the dead-lettering we
        undid (the activity's `completed_at` then), so if the retried activity
        has already been dead-lettered again, its new record is kept.
        """
        failed_at = before.get("completed_at")
        query: dict[str, Any] = {"_id": before["_id"]}
        if failed_at is not None:
            query["failed_at"] = failed_at
        self._ctx.dead_letter.delete_one(query)

    def purge_preview(self) -> dict[str, int]:
        """What `purge` would delete now: terminal activities past their retention."""
        counts = {"completed": 0, "failed": 0}
        for name, query in self._maintenance.retention_queries().items():
            counts[name] = self._ctx.activities.count_documents(query)
        return counts

    def purge(self, *, limits: dict[str, int] | None = None, batch: int = PURGE_BATCH,
              reason: str | None = None, actor: str | None = None,
              audit: bool = False, should_stop: Callable[[], bool] | None = None,
              on_batch: Callable[[int], None] | None = None,
              command: str | None = None) -> dict[str, int]:
        """Apply retention now (queue.purge_expired) until nothing is left to purge.

        `limits` caps each kind ("completed", "failed") at what an operator was
        shown and confirmed (`purge_preview`), so activities that age out in
        between are left for the next purge. With `audit`, the record is written
        before the first delete and updated per batch; `should_stop` is asked
        between batches (then `PurgeInterrupted` carries the counts so far).
        """
        total = {"completed": 0, "failed": 0}
        run = None
        if audit:
            run = self._audit.begin("purge", reason=reason, actor=actor, limits=limits,
                                    command=command)
        try:
            for kind in total:
                remaining = limits.get(kind, 0) if limits is not None else None
                while remaining is None or remaining > 0:
                    if should_stop is not None and should_stop():
                        raise PurgeInterrupted(total)
                    size = batch if remaining is None else min(batch, remaining)
                    done = self._maintenance.purge_expired(limit=size, kinds=(kind,))[kind]
                    total[kind] += done
                    if remaining is not None:
                        remaining -= done
                    if run is not None:
                        run.progress(count=done, purged=total)
                    if on_batch is not None:
                        on_batch(sum(total.values()))
                    if done < size:
                        break
        except PurgeInterrupted:
            if run is not None:
                run.finish("interrupted", purged=total)
            raise
        except BaseException as exc:
            if run is not None:
                run.__exit__(type(exc), exc, None)
            raise
        if run is not None:
            run.finish("done", purged=total)
        return total

    # ---------------------------------------------------------------- helpers

    def _act(self, action: str, activity_id: uuid.UUID | str, allowed: tuple[Status, ...],
             event_type: EventType, state_update: Any, detail: Any, *,
             note: dict[str, Any] | None = None, expect: Expect = None) -> ActionResult:
        return self._act_with_before(action, activity_id, allowed, event_type, state_update,
                                     detail, note=note, expect=expect)[0]

    def _act_with_before(self, action: str, activity_id: uuid.UUID | str,
                         allowed: tuple[Status, ...], event_type: EventType, state_update: Any,
                         detail: Any, *, note: dict[str, Any] | None = None,
                         expect: Expect = None) -> tuple[ActionResult, dict[str, Any]]:
        """One conditional update: the document changes only if its status is `allowed`.

        The update is computed from a snapshot (for the event's "previous"
        values) and fenced on that snapshot's status and priority, so a change
        in between makes it retry on a fresh snapshot instead of recording a
        stale "previous" value. With `expect`, a snapshot that no longer has the
        expected values raises `Changed` instead (nothing written).
        """
        aid = parse_activity_id(activity_id)
        allowed_values = [s.value for s in allowed]
        for _ in range(5):
            now = self._ctx.clock()
            before = self._ctx.activities.find_one({"_id": aid}, {"outbox": 0, "payload": 0})
            if before is None:
                raise NotFound(f"activity {aid} not found")
            status = before.get("status")
            _check(before, action, aid, allowed_values, expect)
            info = {k: v for k, v in {**detail(before), **(note or {})}.items() if v is not None}
            event = new_event(aid, before.get("activity_type"), event_type.value, now, OPERATOR,
                              **info)
            state = state_update(before, now)
            update = merge_updates(state, outbox_update(now, _kept_steps(before, state, event)))
            fence = {"_id": aid, "status": status, "priority": before.get("priority"),
                     "retry_count": before.get("retry_count", 0)}
            if "retry_count" not in before:
                fence.pop("retry_count")
            changed = self._ctx.activities.find_one_and_update(
                fence, update, projection={"payload": 0},
                return_document=ReturnDocument.AFTER)
            if changed is None:
                continue  # changed meanwhile: look again
            self._ctx.outbox.submit(changed)
            return ActionResult(action, aid, str(changed.get("activity_type")), str(status),
                                str(changed["status"]), info), before
        raise WrongState(f"{action} {aid}: the activity keeps changing; try again")

    def action_method(self, action: str) -> Any:
        methods = {"cancel": self.cancel, "retry": self.retry, "run-now": self.run_now,
                   "reschedule": self.reschedule, "set-priority": self.set_priority,
                   "delete": self.delete}
        if action not in methods:
            raise InvalidArgument(f"unknown action {action!r}: use one of {', '.join(methods)}")
        return methods[action]


# ------------------------------------------------------------- action plans
# What each state-changing action writes, from the document as read: one definition,
# used by the one-activity methods above and by the batches (batches.py).

ACTION_EVENTS: dict[str, EventType] = {
    "cancel": EventType.CANCELLED, "retry": EventType.RETRIED, "run-now": EventType.RUN_NOW,
    "reschedule": EventType.RESCHEDULED, "set-priority": EventType.PRIORITY_CHANGED,
    "redrive": EventType.REDRIVEN,
}
PLAN_STATUSES: dict[str, tuple[Status, ...]] = {**ACTION_STATUSES,
                                                "redrive": (Status.DEAD_LETTER,)}


def plan_state(action: str, doc: dict[str, Any], now: datetime,
               params: dict[str, Any]) -> dict[str, Any]:
    """The state update of `action` on `doc` (no outbox part)."""
    if action == "cancel":
        # No claim ended it: an earlier claim's late acknowledgement is a lost claim.
        return {"$set": {"status": Status.CANCELLED.value, "completed_at": now,
                         "last_outcome": "cancelled"}, "$unset": {"last_lease_id": ""}}
    if action in ("retry", "redrive"):
        return {"$set": {"status": Status.PENDING.value, "retry_count": 0},
                "$unset": dict(RESTART_UNSET)}
    if action == "run-now":
        return {"$set": {"status": Status.PENDING.value}, "$unset": {"scheduled_at": ""}}
    if action == "reschedule":
        return {"$set": {"status": Status.SCHEDULED.value, "scheduled_at": params["at"]}}
    if action == "set-priority":
        return {"$set": {"priority": int(params["priority"])}}
    raise InvalidArgument(f"unknown action {action!r}")


def plan_detail(action: str, doc: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The event detail of `action` on `doc` (the "previous" values)."""
    if action == "cancel":
        return {"previous_status": doc["status"]}
    if action in ("retry", "redrive"):
        return {"previous_status": doc["status"],
                "previous_retry_count": doc.get("retry_count", 0)}
    if action == "run-now":
        return {"previous_scheduled_at": doc.get("scheduled_at")}
    if action == "reschedule":
        return {"previous_status": doc["status"],
                "previous_scheduled_at": doc.get("scheduled_at"), "scheduled_at": params["at"]}
    if action == "set-priority":
        return {"old_priority": doc.get("priority"), "new_priority": int(params["priority"])}
    raise InvalidArgument(f"unknown action {action!r}")


def plan_update(action: str, doc: dict[str, Any], now: datetime, params: dict[str, Any],
                note: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the whole update with its outbox event, the event's detail, the event)."""
    info = {k: v for k, v in {**plan_detail(action, doc, params), **note}.items()
            if v is not None}
    event = new_event(doc["_id"], doc.get("activity_type"), ACTION_EVENTS[action].value, now,
                      OPERATOR, **info)
    state = plan_state(action, doc, now, params)
    update = merge_updates(state, outbox_update(now, _kept_steps(doc, state, event)))
    return update, info, event


def fence_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The filter that makes an update apply only to `doc` as it was read.

    Status, priority, retry count, completion time and lease: a claim, an
    acknowledgement or another operator's change in between moves one of
    them, and the update then matches nothing (the activity is left alone).
    """
    fence = {"_id": doc["_id"], "status": doc.get("status"), "priority": doc.get("priority"),
             "completed_at": doc.get("completed_at"), "lease_id": doc.get("lease_id")}
    if "retry_count" in doc:
        fence["retry_count"] = doc["retry_count"]
    return fence


def check_expected(before: dict[str, Any], action: str, aid: uuid.UUID,
                   allowed: list[str], expect: Expect) -> None:
    """`_check` for other modules: WrongState or Changed, else nothing."""
    _check(before, action, aid, allowed, expect)


class PurgeInterrupted(Exception):
    """A purge stopped between batches (a signal); `counts` is what it deleted."""

    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__("purge interrupted")
        self.counts = counts


class Changed(WrongState):
    """The activity is no longer what an operator was shown: skipped, nothing written."""


def _note(reason: str | None, actor: str | None) -> dict[str, Any]:
    """The operator's reason and name, for an event's detail."""
    return {"reason": reason, "actor": actor}


def snapshot_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The fields an action by filter re-checks: a change to any of them skips the activity."""
    return {name: doc.get(name) for name in EXPECT_FIELDS}


def _check(before: dict[str, Any], action: str, aid: uuid.UUID, allowed: list[str],
           expect: Expect) -> None:
    """Raise WrongState (not an eligible status) or Changed (not what was shown)."""
    status = str(before.get("status"))
    if expect is not None:
        moved = [f"{name} {expect.get(name)!s} -> {before.get(name)!s}" for name in expect
                 if before.get(name) != expect.get(name)]
        if moved:
            raise Changed(f"{action} {aid}: skipped, it changed since it was shown "
                          f"({'; '.join(moved)})", status=status)
    if status not in allowed:
        raise WrongState(_wrong_state_message(action, aid, status, allowed), status=status)


def _kept_steps(before: dict[str, Any], state: dict[str, Any],
                event: dict[str, Any]) -> list[dict[str, Any]]:
    """The action's event, with what it overwrites that readers derive events from.

    A cleared `started_at` takes the last attempt's derived steps with it: they
    are stored now (derived.attempt_events). A changed schedule is kept in the
    event's detail, so the enqueue step is still shown as it was.
    """
    touched = {name for op in ("$set", "$unset") for name in state.get(op, {})}
    if "scheduled_at" in touched and event["event_type"] not in (
            EventType.RUN_NOW.value, EventType.RESCHEDULED.value):
        event["detail"]["previous_scheduled_at"] = before.get("scheduled_at")
    steps = []
    if "started_at" in touched and before.get("started_at") is not None:
        steps = attempt_events(before["_id"], before.get("activity_type"), before["started_at"],
                               before.get("worker_id") or before.get("last_worker_id"),
                               int(before.get("retry_count") or 0) + 1)
    return [*steps, event]


def _wrong_state_message(action: str, aid: uuid.UUID, status: str, allowed: list[str]) -> str:
    shown = "running" if status == Status.PROCESSING.value else status
    text = f"cannot {action} activity {aid}: it is {shown}; {action} applies to " \
           f"{' or '.join(allowed)} activities"
    if status == Status.PROCESSING.value:
        text += " (a worker holds it: wait for the attempt to end)"
    return text

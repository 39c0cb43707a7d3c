"""Operator actions of docs/design.md ("Operator actions"): cancel, retry, redrive, run now,
reschedule, priority, purge, and our `delete` (terminal activities only).

Each action on one activity is one atomic, conditional `findOneAndUpdate` of
the activity document: the filter names the statuses the action applies to,
so an action never overwrites a change made meanwhile by a worker, the reaper
or another operator. Its event (`Cancelled`, `Retried`, ...) travels in the
same update through the outbox (see `writes.py`), like every queue operation.

Running (`processing`) activities are refused by every action but cancel: a worker
holds the lease and would overwrite or race the operator's change. Cancel ends the
claim itself, fenced on its lease id, and the holder learns it at its next write of
the claim (docs/design.md, "Cancelling a running activity").

Wrong status -> `WrongState`, unknown id -> `NotFound`,
malformed id or value -> `InvalidArgument`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import DeleteOne, ReturnDocument

from runnerq_cli.backend.domain.filters import check_error_contains, error_contains_clause
from runnerq_cli.backend.domain.models import Priority, Status, parse_activity_id, to_jsonable
from runnerq_cli.backend.ops.actions import (
    ACTIONS,
    SNAPSHOT_FIELDS,
    ActionResult,
    Expect,
    action,
    check,
    fence_of,
    note,
    plan_update,
)
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.ops.batches import BATCH_SIZE, Batches, BatchOutcome
from runnerq_cli.backend.queue.maintenance import Maintenance
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.servertime import server_update, write_time
from runnerq_cli.errors import InvalidArgument, NotFound, PurgeInterrupted, WrongState

PURGE_BATCH = 1000


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
        """pending, scheduled, waiting or processing -> cancelled (terminal; retention
        counts from completed_at). A running one's claim ends in the same update: its
        worker's next renewal is refused and says it was cancelled."""
        return self._act("cancel", activity_id, {}, reason, actor, expect)[0]

    def retry(self, activity_id: uuid.UUID | str, reason: str | None = None,
              actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """failed, dead_letter or cancelled -> pending, as a fresh start (retry_count 0).

        Clears completed_at and the previous outcome. For a dead-lettered
        activity the dead-letter record is removed after the activity update
        (see `_drop_dead_letter_record` for why in that order).
        """
        result, before = self._act("retry", activity_id, {}, reason, actor, expect)
        if before["status"] == Status.DEAD_LETTER.value:
            self.drop_dead_letter_record(before)
        return result

    def run_now(self, activity_id: uuid.UUID | str, reason: str | None = None,
                actor: str | None = None, *, expect: Expect = None) -> ActionResult:
        """scheduled -> pending now (skips a delay or a retry back-off)."""
        return self._act("run-now", activity_id, {}, reason, actor, expect)[0]

    def reschedule(self, activity_id: uuid.UUID | str, at: datetime,
                   reason: str | None = None, actor: str | None = None, *,
                   expect: Expect = None) -> ActionResult:
        """pending or scheduled -> scheduled at `at` (timezone-aware, in the future)."""
        return self._act("reschedule", activity_id, {"at": self.future_time(at)}, reason,
                         actor, expect)[0]

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
        return self._act("set-priority", activity_id, {"priority": Priority.parse(priority)},
                         reason, actor, expect)[0]

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
        for _ in range(5):
            before = self._ctx.activities.find_one({"_id": aid}, SNAPSHOT_FIELDS)
            if before is None:
                raise NotFound(f"activity {aid} not found")
            status = str(before.get("status"))
            check(before, "delete", aid, expect)
            if status == Status.DEAD_LETTER.value:
                self.drop_dead_letter_record(before)
            gone = self._ctx.activities.delete_one(fence_of(before, ACTIONS["delete"].fence))
            if not gone.deleted_count:
                continue  # changed meanwhile: look again
            self._ctx.results.delete_one({"_id": aid})
            self._ctx.events.delete_many({"activity_id": aid})
            self._ctx.idempotency.delete_many({"activity_id": aid})
            return ActionResult("delete", aid, str(before.get("activity_type")), status,
                                "deleted", {k: v for k, v in note(reason, actor).items()
                                            if v is not None})
        raise WrongState(f"delete {aid}: the activity keeps changing; try again")

    # ------------------------------------------------------------------- bulk

    def redrive(self, types: Iterable[str] | None = None, *, dry_run: bool = False,
                ids: Iterable[uuid.UUID | str] | None = None,
                limit: int | None = None, reason: str | None = None,
                actor: str | None = None, should_stop: Callable[[], bool] | None = None,
                on_batch: Callable[[int], None] | None = None,
                command: str | None = None,
                error_contains: str | None = None,
                batch_size: int | None = None) -> RedriveReport:
        """Every dead-lettered activity (of `types`, if given; whose last error contains
        `error_contains`, if given) back to pending.

        The activity documents are the truth (status dead_letter), not the
        dead-letter collection: an activity whose record was never written
        (outbox not flushed yet) is redriven too. Each activity is its own
        conditional update, so a concurrent retry of one of them is not
        done twice. `ids` limits it to those activities (what a preview
        showed and the operator confirmed). Records left by an interrupted retry or redrive (their
        activity is no longer dead_letter) are removed as well.

        `limit` bounds it to the `limit` dead-lettered longest (oldest first, so running
        it again goes on with the next ones), as `--max` bounds a bulk action.

        Batched (batches.py, `batch_size` at a time) and audited before acting, like
        `BulkActions.apply`; `should_stop` is asked between batches.
        """
        if limit is not None and limit < 1:
            raise InvalidArgument("limit must be at least 1", "limit")
        if batch_size is not None and not 1 <= batch_size <= 10_000:
            raise InvalidArgument("batch_size must be between 1 and 10000", "batch_size")
        from runnerq_cli.filter_values import filter_terms

        type_list = list(filter_terms(types, "types"))
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
        told = note(reason, actor or run.doc["detail"]["actor"])

        def record(chunk: list[uuid.UUID], done: BatchOutcome) -> dict[str, Any]:
            moved.extend(summaries[r.activity_id] for r in done.applied)
            report.last_id = chunk[-1]
            return {"last_id": str(chunk[-1]), "redriven": len(moved)}

        with run:
            report.interrupted = Batches(self._ctx).run_all(
                "redrive", [doc["_id"] for doc in found], note=told, audit=run,
                record=record, then=None if on_batch is None else lambda: on_batch(len(moved)),
                should_stop=should_stop, batch_size=batch_size or BATCH_SIZE)
            if stale and not report.interrupted:
                self._ctx.dead_letter.bulk_write(
                    [DeleteOne({"_id": r["_id"], "failed_at": r.get("failed_at")})
                     for r in stale], ordered=False)
            run.finish("interrupted" if report.interrupted else "done", redriven=len(moved),
                       stale_records_removed=0 if report.interrupted else len(stale),
                       last_id=str(report.last_id) if report.last_id else None)
        return report

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
        """Apply retention now (queue.maintenance.purge_expired) until nothing is left to purge.

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

    def _act(self, name: str, activity_id: uuid.UUID | str, params: dict[str, Any],
             reason: str | None, actor: str | None,
             expect: Expect) -> tuple[ActionResult, dict[str, Any]]:
        """One conditional update (actions.plan_update), with the document as it was.

        The update is computed from a snapshot (for the event's "previous"
        values) and fenced on it (actions.fence_of), so a change in between
        makes it retry on a fresh snapshot instead of recording a stale
        "previous" value. With `expect`, a snapshot that no longer has the
        expected values raises `Changed` instead (nothing written).
        """
        aid = parse_activity_id(activity_id)
        for _ in range(5):
            now = write_time(self._ctx.clock)  # events, completed_at: the server's
            before = self._ctx.activities.find_one({"_id": aid}, {"outbox": 0, "payload": 0})
            if before is None:
                raise NotFound(f"activity {aid} not found")
            check(before, name, aid, expect)
            update, info, _ = plan_update(name, before, now, params, note(reason, actor))
            changed = self._ctx.activities.find_one_and_update(
                fence_of(before, ACTIONS[name].fence), server_update(update),
                projection={"payload": 0},
                return_document=ReturnDocument.AFTER)
            if changed is None:
                continue  # changed meanwhile: look again
            self._ctx.outbox.submit(changed)
            return ActionResult(name, aid, str(changed.get("activity_type")),
                                str(before.get("status")), str(changed["status"]), info), before
        raise WrongState(f"{name} {aid}: the activity keeps changing; try again")

    def action_method(self, name: str) -> Any:
        """The method of an action by filter (ACTIONS), by its name."""
        if not action(name).by_filter:
            raise InvalidArgument(f"{name} is not an action by filter")
        return getattr(self, name.replace("-", "_"))

"""Operator actions on a batch of activities in a fixed number of commands.

One batch (up to `BATCH_SIZE` ids) of a state-changing action is:

    1 find      the documents as they are now ({_id: {$in: ids}}, no payload)
    2 bulk_write one UpdateOne per eligible document, fenced on what was read
                (actions.fence_of: status, priority, retry count, completion
                time, lease) with the action's event in the outbox
    3 find      which documents carry their new event (the applied ones), with
                their outboxes
    4 flush     those outboxes, as just read (writes.OutboxWriter.flush: the
                events' stamped inserts, INSERT_CHUNK a command, then the clear)
    5 bulk_write the dead-letter records a retry or redrive withdrew

so about ten commands per batch whatever its size, instead of several per
activity. An update whose fence no longer holds (a worker claimed the
activity, another operator changed it) matches nothing: that activity is
read again in the next round, checked again, and skipped if the action no
longer applies or it is no longer what the operator was shown. A `delete`
batch deletes the dead-letter records, then the activities (fenced on
status and completion time), then the results, events and keys of those
that are gone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pymongo import DeleteOne, UpdateOne

from runnerq_cli.backend.domain.models import MalformedDocument, Status
from runnerq_cli.backend.domain.sizes import BULK_BATCH_SIZE
from runnerq_cli.backend.ops.actions import (
    ACTIONS,
    SNAPSHOT_FIELDS,
    ActionResult,
    check,
    fence_of,
    plan_update,
)
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.servertime import server_update, write_time
from runnerq_cli.errors import InvalidArgument, NotFound, WrongState

if TYPE_CHECKING:
    from runnerq_cli.backend.ops.audit import AuditRun

BATCH_SIZE = BULK_BATCH_SIZE
ROUNDS = 3  # reads of an activity whose fence moved before it is reported as changed


@dataclass
class BatchOutcome:
    """What one batch did: results in the order of the ids, and the skips."""

    applied: list[ActionResult] = field(default_factory=list)
    skipped: list[tuple[dict[str, Any], Exception]] = field(default_factory=list)


def _skip(aid: uuid.UUID, exc: Exception) -> tuple[dict[str, Any], Exception]:
    return ({"id": aid, "reason": str(exc), "status": getattr(exc, "status", None)}, exc)


class Batches:
    """Batched state changes and deletes on one queue."""

    def __init__(self, ctx: QueueContext) -> None:
        self._ctx = ctx

    def run_all(self, action: str, ids: list[uuid.UUID], *, note: dict[str, Any],
                audit: AuditRun,
                record: Callable[[list[uuid.UUID], BatchOutcome], dict[str, Any]],
                then: Callable[[], None] | None = None,
                should_stop: Callable[[], bool] | None = None,
                batch_size: int = BATCH_SIZE,
                expect: dict[uuid.UUID, dict[str, Any]] | None = None,
                params: dict[str, Any] | None = None) -> bool:
        """Apply `action` to all of `ids`, `batch_size` at a time (the loop of a bulk
        action and of a redrive); True if `should_stop` ended it.

        `should_stop` is asked before each batch, so a batch begun is finished. After
        each, `record(chunk, outcome)` adds it to the caller's report and returns the
        figures the audit record's progress stores beside the ids applied; then
        `then()` (the caller's progress callback) sees the record already written.
        """
        for start in range(0, len(ids), batch_size):
            if should_stop is not None and should_stop():
                return True
            chunk = ids[start:start + batch_size]
            done = self.run(action, chunk, note=note, expect=expect, params=params)
            audit.progress([r.activity_id for r in done.applied], **record(chunk, done))
            if then is not None:
                then()
        return False

    def run(self, action: str, ids: list[uuid.UUID], *, note: dict[str, Any],
            expect: dict[uuid.UUID, dict[str, Any]] | None = None,
            params: dict[str, Any] | None = None) -> BatchOutcome:
        """Apply `action` to `ids` (one batch); `expect`: snapshots the operator was shown."""
        if action == "delete":
            return self._delete(ids, note, expect or {})
        return self._update(action, ids, note, expect or {}, params or {})

    def _update(self, action: str, ids: list[uuid.UUID], note: dict[str, Any],
                expect: dict[uuid.UUID, dict[str, Any]],
                params: dict[str, Any]) -> BatchOutcome:
        outcome = BatchOutcome()
        done: dict[uuid.UUID, ActionResult] = {}
        skipped: dict[uuid.UUID, tuple[dict[str, Any], Exception]] = {}
        pending = list(dict.fromkeys(ids))
        for _ in range(ROUNDS):
            if not pending:
                break
            pending = self._update_round(action, pending, note, expect, params, done, skipped)
        for aid in pending:  # the fence moved every time it was read
            skipped[aid] = _skip(aid, WrongState(
                f"{action} {aid}: skipped, it changed while it was acted on; try again"))
        for aid in dict.fromkeys(ids):
            if aid in done:
                outcome.applied.append(done[aid])
            elif aid in skipped:
                outcome.skipped.append(skipped[aid])
        return outcome

    def _update_round(self, action: str, ids: list[uuid.UUID], note: dict[str, Any],
                      expect: dict[uuid.UUID, dict[str, Any]], params: dict[str, Any],
                      done: dict[uuid.UUID, ActionResult],
                      skipped: dict[uuid.UUID, tuple[dict[str, Any], Exception]],
                      ) -> list[uuid.UUID]:
        """One read, one write, one check; returns the ids whose fence moved meanwhile."""
        ctx = self._ctx
        eligible = self._eligible(action, ids, {"outbox": 0, "payload": 0}, expect, skipped)
        now = write_time(ctx.clock)  # events, completed_at: the server's as they land
        writes: list[UpdateOne] = []
        planned: dict[uuid.UUID, tuple[dict[str, Any], dict[str, Any], Any, Any]] = {}
        for aid, before in eligible:
            update, info, event = plan_update(action, before, now, params, note)
            writes.append(UpdateOne(fence_of(before, ACTIONS[action].fence), server_update(update)))
            planned[aid] = (before, info, event["_id"],
                            update["$set"].get("status", before.get("status")))
        if not writes:
            return []
        ctx.activities.bulk_write(writes, ordered=False)
        applied = self._applied(planned)
        boxes = [doc for doc in applied.values() if doc.get("outbox")]
        if boxes:
            ctx.outbox.flush(boxes, just_read=True)  # _applied read them: no second read
        withdrawn: list[DeleteOne] = []
        for aid in applied:
            before, info, _, status = planned[aid]
            done[aid] = ActionResult(action, aid, str(before.get("activity_type")),
                                     str(before.get("status")), str(status), info)
            if before.get("status") == Status.DEAD_LETTER.value:
                query: dict[str, Any] = {"_id": aid}
                if before.get("completed_at") is not None:
                    query["failed_at"] = before["completed_at"]
                withdrawn.append(DeleteOne(query))
        if withdrawn:  # after the activity updates: see Operator.drop_dead_letter_record
            ctx.dead_letter.bulk_write(withdrawn, ordered=False)
        return [aid for aid in planned if aid not in applied]

    def _applied(self, planned: dict[uuid.UUID, tuple[Any, ...]],
                 ) -> dict[uuid.UUID, dict[str, Any]]:
        """The planned documents that took their update: their outbox holds its event
        (or, flushed meanwhile by someone else, the event is already stored)."""
        ctx = self._ctx
        event_ids = {plan[2]: aid for aid, plan in planned.items()}
        applied: dict[uuid.UUID, dict[str, Any]] = {}
        for doc in ctx.activities.find(
                {"_id": {"$in": list(planned)}},
                # what the flush reads to wake the waiters of a cancelled one, too
                {"outbox": 1, "activity_type": 1, "status": 1, "awaited": 1,
                 "parent_activity_id": 1}).batch_size(len(planned) + 1):
            events = (doc.get("outbox") or {}).get("events") or []
            if any(isinstance(e, dict) and e.get("_id") in event_ids for e in events):
                applied[doc["_id"]] = doc
        missing = [eid for eid, aid in event_ids.items() if aid not in applied]
        if missing:
            for event in ctx.events.find({"_id": {"$in": missing}}, {"activity_id": 1}):
                aid = event_ids[event["_id"]]
                applied[aid] = {"_id": aid}  # its outbox was copied out already
        return applied

    def _eligible(self, action: str, ids: list[uuid.UUID], projection: dict[str, Any],
                  expect: dict[uuid.UUID, dict[str, Any]],
                  skipped: dict[uuid.UUID, tuple[dict[str, Any], Exception]],
                  ) -> list[tuple[uuid.UUID, dict[str, Any]]]:
        """One read of `ids`: (id, document) of those `action` may act on, in order; the
        others (not found, or not as expected) go into `skipped` with the reason."""
        found = {d["_id"]: d for d in self._ctx.activities.find(
            {"_id": {"$in": ids}}, projection).batch_size(len(ids) + 1)}
        eligible = []
        for aid in ids:
            before = found.get(aid)
            if before is None:
                skipped[aid] = _skip(aid, NotFound(f"activity {aid} not found"))
                continue
            try:
                check(before, action, aid, expect.get(aid))
            except (WrongState, InvalidArgument, MalformedDocument) as exc:
                skipped[aid] = _skip(aid, exc)
                continue
            eligible.append((aid, before))
        return eligible

    def _delete(self, ids: list[uuid.UUID], note: dict[str, Any],
                expect: dict[uuid.UUID, dict[str, Any]]) -> BatchOutcome:
        ctx = self._ctx
        outcome = BatchOutcome()
        unique = list(dict.fromkeys(ids))
        skipped: dict[uuid.UUID, tuple[dict[str, Any], Exception]] = {}
        planned = dict(self._eligible("delete", unique, SNAPSHOT_FIELDS, expect, skipped))
        gone: set[uuid.UUID] = set()
        if planned:
            records = [DeleteOne({"_id": aid, "failed_at": doc.get("completed_at")})
                       for aid, doc in planned.items()
                       if doc.get("status") == Status.DEAD_LETTER.value]
            if records:
                ctx.dead_letter.bulk_write(records, ordered=False)
            ctx.activities.bulk_write(
                [DeleteOne(fence_of(doc, ACTIONS["delete"].fence)) for doc in planned.values()],
                ordered=False)
            left = {d["_id"] for d in ctx.activities.find(
                {"_id": {"$in": list(planned)}}, {"_id": 1}).batch_size(len(planned) + 1)}
            gone = set(planned) - left
            if gone:
                ctx.results.delete_many({"_id": {"$in": list(gone)}})
                ctx.events.delete_many({"activity_id": {"$in": list(gone)}})
                ctx.idempotency.delete_many({"activity_id": {"$in": list(gone)}})
        detail = {k: v for k, v in note.items() if v is not None}
        for aid in unique:
            if aid in gone:
                before = planned[aid]
                outcome.applied.append(ActionResult(
                    "delete", aid, str(before.get("activity_type")), str(before.get("status")),
                    "deleted", detail))
            elif aid in planned:
                outcome.skipped.append(_skip(aid, WrongState(
                    f"delete {aid}: skipped, it changed while it was acted on; try again",
                    status=str(planned[aid].get("status")))))
            else:
                outcome.skipped.append(skipped[aid])
        return outcome

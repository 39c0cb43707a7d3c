"""Operator actions on many activities: select what a filter matches, then act on exactly that.

    selection = q.bulk.select("retry", ActivityFilter(statuses=("failed",), types=("charge",)),
                              max_count=100)
    # ... show selection.matched and selection.sample, ask the operator ...
    report = q.bulk.apply("retry", selection, reason="gateway fixed", actor="ana")

`select` reads only: how many activities match, the ids of the first
`max_count` (oldest first) and a snapshot of each. `apply` then acts in
batches (batches.py: one read and one bulk write of fenced updates per
batch), each update conditional on the snapshot (status, retry count,
priority, completion time) and on the document as read: an activity that
changed in between is skipped with the reason, never acted on, and one that
appeared in between is not touched. Running the same action again is
harmless: what it already did no longer matches (or no longer has the
snapshot). Its audit record is written before the first batch (audit.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.filters import ActivityFilter
from runnerq_cli.backend.domain.models import (
    Priority,
    display_status,
    parse_activity_id,
    to_jsonable,
)
from runnerq_cli.backend.domain.shapes import ACTIVITY, Shape, well_formed
from runnerq_cli.backend.domain.sizes import MAX_BULK
from runnerq_cli.backend.ops.actions import SNAPSHOT_FIELDS, ActionResult, action, snapshot_of
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.ops.batches import BATCH_SIZE, Batches, BatchOutcome
from runnerq_cli.backend.ops.operator import Operator
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import InvalidArgument, WrongState

AUDIT_LOOKBACK = 20  # runs of an action read to find the last one of the same command
SAMPLE_SIZE = 10
SCAN_BATCH = 500
# Events that name the worker an attempt ran on (for `--worker`).
WORKER_EVENTS = ("Started", "Failed", "DeadLetter", "Completed", "Requeued", "Retrying",
                 "Dequeued")


@dataclass(frozen=True)
class Selection:
    """What a filter matched when it was shown: the ids acted on are exactly `ids`."""

    action: str
    filter: ActivityFilter
    matched: int  # how many activities matched (may exceed len(ids))
    ids: list[uuid.UUID]
    snapshots: dict[uuid.UUID, dict[str, Any]]
    sample: list[dict[str, Any]]
    max_count: int | None

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "filter": self.filter.to_json(), "matched": self.matched,
                "selected": len(self.ids), "max": self.max_count,
                "sample": to_jsonable(self.sample)}


@dataclass
class BulkReport:
    """What `apply` did: applied results, and each skipped activity with its reason."""

    action: str
    selected: int
    matched: int
    applied: list[ActionResult] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    # Every outcome in the order of the ids: an ActionResult, or (the skip, its error).
    outcomes: list[ActionResult | tuple[dict[str, Any], Exception]] = field(
        default_factory=list)
    interrupted: bool = False  # stopped between batches (a signal): the rest is left
    last_id: uuid.UUID | None = None  # the last id of the last batch done
    reached: int = 0  # how many of the selected ids were handled

    def errors(self) -> list[Exception]:
        """The error of each skipped activity, in the order of the ids."""
        return [outcome[1] for outcome in self.outcomes if isinstance(outcome, tuple)]

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "matched": self.matched, "selected": self.selected,
                "applied": len(self.applied), "skipped": len(self.skipped),
                "interrupted": self.interrupted,
                "last_id": str(self.last_id) if self.last_id else None,
                "results": [r.to_json() for r in self.applied],
                "skips": to_jsonable(self.skipped)}


# The fields a selection reads (SNAPSHOT_FIELDS), with the types activities must have.
SNAPSHOT_SHAPE = Shape("activity", {k: v for k, v in ACTIVITY.types.items()
                                    if k in SNAPSHOT_FIELDS}, ("_id",))

class BulkActions:
    """`select` then `apply`, for every operator action (mixed into `RunnerQ`)."""

    def __init__(self, ctx: QueueContext, operator: Operator, audit: AuditLog) -> None:
        self._ctx = ctx
        self._operator = operator
        self._audit = audit

    def select(self, name: str, flt: ActivityFilter, max_count: int | None = None,
               *, sample_size: int = SAMPLE_SIZE, **params: Any) -> Selection:
        """The activities `flt` matches for action `name` (only its eligible statuses),
        oldest first.

        With the action's `params` (`at`, `priority`), those already where the action
        would put them are left out: a run again after an interruption goes on with
        the rest instead of doing the first ones twice. Statuses the action does not
        apply to raise `WrongState`. Reads only.
        """
        row = action(name)
        if not row.by_filter:
            raise InvalidArgument(f"{name} is not an action by filter")
        allowed = row.from_states
        if max_count is not None and not 1 <= max_count <= MAX_BULK:
            raise InvalidArgument(f"max_count must be between 1 and {MAX_BULK}", "max_count")
        wrong = [s for s in flt.statuses if s not in allowed]
        if wrong:
            names = " or ".join(s.value for s in allowed)
            raise WrongState(f"{name} applies to {names} activities, not "
                             f"{', '.join(s.value for s in wrong)}", status=wrong[0].value)
        flt = flt.restricted_to(row.default_states)
        limit = max_count if max_count is not None else MAX_BULK
        query = flt.query()
        if row.done is not None and params:
            query = {"$and": [query, {"$nor": [row.done(self._params(name, params))]}]}
        order = [("created_at", 1), ("_id", 1)]
        if flt.worker is None:
            matched = self._ctx.activities.count_documents(query)
            docs = list(well_formed(self._ctx.activities.find(query, SNAPSHOT_FIELDS)
                                    .sort(order).limit(limit).batch_size(min(limit, 2000)),
                                    SNAPSHOT_SHAPE, self._ctx.activities.name))
        else:
            matched, docs = self._select_by_worker(query, flt.worker, order, limit)
        now = self._ctx.clock()
        return Selection(name, flt, matched, [d["_id"] for d in docs],
                         {d["_id"]: snapshot_of(d) for d in docs},
                         [_summary(d, now) for d in docs[:sample_size]], max_count)

    def _select_by_worker(self, query: dict[str, Any], worker: str,
                          order: list[tuple[str, int]],
                          limit: int) -> tuple[int, list[dict[str, Any]]]:
        """Activities matching `query` that `worker` holds or ran an attempt of.

        The activity names its holder (`worker_id`) and the worker of its last
        acknowledged attempt (`last_worker_id`); earlier attempts are in its events.

        Scans the candidates in batches and asks the events of each batch
        (indexed by activity id), so no unbounded list of ids is built.
        """
        matched, kept = 0, list[dict[str, Any]]()
        batch: list[dict[str, Any]] = []

        def flush() -> None:
            nonlocal matched
            ids = [d["_id"] for d in batch if worker not in _workers_of(d)]
            ran = set()
            if ids:
                ran = set(self._ctx.events.distinct("activity_id", {
                    "activity_id": {"$in": ids}, "worker_id": worker,
                    "event_type": {"$in": list(WORKER_EVENTS)}}))
            for doc in batch:
                if worker in _workers_of(doc) or doc["_id"] in ran:
                    matched += 1
                    if len(kept) < limit:
                        kept.append(doc)
            batch.clear()

        fields = {**SNAPSHOT_FIELDS, "worker_id": 1, "last_worker_id": 1}
        for doc in self._ctx.activities.find(query, fields).sort(order):
            batch.append(doc)
            if len(batch) >= SCAN_BATCH:
                flush()
        flush()
        return matched, kept

    def preview_ids(self, name: str, ids: Iterable[uuid.UUID | str]) -> list[dict[str, Any]]:
        """What `apply` would do to each id now (a dry run by ids): reads only."""
        allowed = set(action(name).from_values)
        aids = [parse_activity_id(i) for i in ids]
        found = {d["_id"]: d for d in self._ctx.activities.find({"_id": {"$in": aids}},
                                                                SNAPSHOT_FIELDS)}
        now = self._ctx.clock()
        rows = []
        for aid in aids:
            doc = found.get(aid)
            if doc is None:
                rows.append({"id": aid, "eligible": False, "reason": "not found"})
                continue
            eligible = doc.get("status") in allowed
            rows.append({**_summary(doc, now), "eligible": eligible,
                         "reason": None if eligible else
                         f"{name} does not apply to {doc.get('status')} activities"})
        return rows

    def apply(self, action: str, target: Selection | Iterable[uuid.UUID | str], *,
              reason: str | None = None, actor: str | None = None,
              batch_size: int = BATCH_SIZE, should_stop: Callable[[], bool] | None = None,
              on_batch: Callable[[BulkReport], None] | None = None,
              command: str | None = None, **params: Any) -> BulkReport:
        """Run `action` on each id of `target` in batches (batches.py), audited before acting.

        With a `Selection`, each activity must still be as it was selected
        (else it is skipped as changed). `params` are the action's own
        (`at` for reschedule, `priority` for set-priority).

        The audit record (audit.AuditRun) is written with the intent before
        the first write and updated after each batch. `should_stop` is asked
        between batches: when it says so, the run ends there (the batch in
        progress is finished), the report says `interrupted` and the last id
        reached, and so does the audit record. Running the same action again
        does nothing twice: what was done no longer applies.
        """
        self._operator.action_method(action)  # an unknown action is refused here
        if isinstance(target, Selection):
            if target.action != action:
                raise InvalidArgument(f"this selection was made for {target.action}, "
                                      f"not {action}")
            ids: list[uuid.UUID] = list(target.ids)
            snapshots = target.snapshots
            matched = target.matched
        else:
            ids = [parse_activity_id(i) for i in target]
            snapshots = {}
            matched = len(ids)
        params = self._params(action, params)  # checked once, before anything is written
        if not 1 <= batch_size <= 10_000:
            raise InvalidArgument("batch size must be between 1 and 10000")
        intent: dict[str, Any] = {"matched": matched, "selected": len(ids), "command": command,
                                  **{k: to_jsonable(v) for k, v in params.items()}}
        if isinstance(target, Selection):
            intent["filter"] = target.filter.to_json()
            intent["max"] = target.max_count
        report = BulkReport(action, len(ids), matched)
        if not ids:
            return report
        run = self._audit.begin(action, reason=reason, actor=actor, **intent)
        note = {"reason": reason, "actor": actor or run.doc["detail"]["actor"]}

        def record(chunk: list[uuid.UUID], done: BatchOutcome) -> dict[str, Any]:
            by_id: dict[uuid.UUID, ActionResult | tuple[dict[str, Any], Exception]] = {
                r.activity_id: r for r in done.applied}
            by_id.update({skip["id"]: (skip, exc) for skip, exc in done.skipped})
            report.applied.extend(done.applied)
            report.skipped.extend(skip for skip, _ in done.skipped)
            for aid in dict.fromkeys(chunk):  # in the order of the ids
                if aid in by_id:
                    report.outcomes.append(by_id[aid])
            report.last_id = chunk[-1]
            report.reached += len(chunk)
            return {"applied": len(report.applied), "skipped": len(report.skipped),
                    "last_id": str(report.last_id), "reached": report.reached}

        with run:
            report.interrupted = Batches(self._ctx).run_all(
                action, ids, note=note, audit=run, record=record,
                then=None if on_batch is None else lambda: on_batch(report),
                should_stop=should_stop, batch_size=batch_size, expect=snapshots,
                params=params)
            run.finish("interrupted" if report.interrupted else "done",
                       applied=len(report.applied), skipped=len(report.skipped),
                       last_id=str(report.last_id) if report.last_id else None,
                       reached=report.reached)
        return report


    def unfinished(self, name: str, command: str) -> dict[str, Any] | None:
        """What the newest audited run of `command` recorded (its `at`, `priority`...,
        and its `state`), if it left work of its filter undone: it was interrupted, or
        its `max_count` cut it (matched more than it selected). A run again of the same
        command goes on with its values (a `--delay` reschedule keeps the first run's
        time, so what that run did is left out instead of being rescheduled again),
        else None."""
        for entry in self._audit.audit(action=name, limit=AUDIT_LOOKBACK):
            if entry.detail.get("command") == command:
                detail = entry.detail
                cut = (entry.state == "done" and isinstance(detail.get("matched"), int)
                       and isinstance(detail.get("selected"), int)
                       and detail["matched"] > detail["selected"])
                return {**detail, "state": entry.state} if (
                    entry.state == "interrupted" or cut) else None
        return None

    def _params(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """The action's own values (`at` for reschedule, `priority` for set-priority),
        checked and as they are stored."""
        checked = dict(params)
        if name == "reschedule" and "at" in params:
            checked["at"] = self._operator.future_time(params["at"])
        if name == "set-priority" and "priority" in params:
            checked["priority"] = Priority.parse(params["priority"])
        return checked


def _summary(doc: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A sample row: id, type, status, age, last error."""
    created = doc.get("created_at")
    status = str(doc.get("status"))
    age = (now - created).total_seconds() if isinstance(created, datetime) else None
    return {"id": doc["_id"], "activity_type": doc.get("activity_type"),
            "status": display_status(status, int(doc.get("retry_count") or 0)),
            "age_seconds": round(age, 3) if age is not None else None,
            "last_error": doc.get("last_error")}


def _workers_of(doc: dict[str, Any]) -> set[Any]:
    return {doc.get("worker_id"), doc.get("last_worker_id")} - {None}

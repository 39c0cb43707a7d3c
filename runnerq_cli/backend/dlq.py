"""Dead-letter export and import: move a dead-letter set elsewhere, inspect it, replay it.

Export writes one JSON object per dead-lettered activity, in the line format
`enqueue --from` reads (type, payload, priority, metadata, max_retries,
timeout, retry_delay) plus fields that describe where it came from
(`models.EXPORT_INFO_FIELDS`: original id, error, attempts, timestamps), which
`enqueue --from` ignores. Exporting reads only.

Import enqueues each line as a new activity whose metadata `redriven_from`
names the original id, with the original id as its idempotency key (unless
the line sets one): importing the same file again enqueues nothing twice.
`redrive=True` instead revives the original activities by id, where they
still exist in this queue, dead-lettered. Each line has its own outcome; one
bad line does not stop the others.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.audit import AuditLog
from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.models import Priority, Status, to_jsonable
from runnerq_cli.backend.shapes import ACTIVITY, well_formed
from runnerq_cli.errors import DuplicateActivity, IdempotencyConflict, InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.operator import Operator
    from runnerq_cli.backend.queue import ActivityQueue, ActivitySpec

LINK_KEY = "redriven_from"  # metadata key naming the original activity


@dataclass(frozen=True)
class ImportLine:
    """One parsed line of an import file: its spec, or why it is invalid."""

    line: int
    original_id: uuid.UUID | None = None
    spec: ActivitySpec | None = None
    error: str | None = None


@dataclass(frozen=True)
class ImportOutcome:
    """What importing one line did (or, dry run, would do)."""

    line: int
    outcome: str  # enqueued, existing, redriven, skipped, not_found, invalid, conflict
    original_id: uuid.UUID | None = None
    id: uuid.UUID | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "outcome": self.outcome,
                "original_id": str(self.original_id) if self.original_id else None,
                "id": str(self.id) if self.id else None, "reason": self.reason}


def export_line(doc: dict[str, Any], error: str | None, failed_at: datetime | None,
                queue: str) -> dict[str, Any]:
    """An exported line from an activity document (or a dead-letter record's snapshot)."""
    priority = Priority.label(doc.get("priority", Priority.NORMAL))
    line: dict[str, Any] = {
        "type": doc.get("activity_type"),
        "payload": doc.get("payload") or {},
        "priority": priority,
        "metadata": dict(doc.get("metadata") or {}),
        "max_retries": doc.get("max_retries"),
        "timeout": doc.get("timeout_seconds"),
        "retry_delay": doc.get("retry_delay_seconds"),
        "original_id": str(doc["_id"]),
        "queue": queue,
        "status": Status.DEAD_LETTER.value,
        "error": error,
        "retry_count": int(doc.get("retry_count") or 0),
        "attempts": int(doc.get("retry_count") or 0) + 1,
        "created_at": doc.get("created_at"),
        "dead_lettered_at": failed_at,
        "last_error_at": doc.get("last_error_at"),
        "original_idempotency_key": doc.get("idempotency_key"),
    }
    return to_jsonable({k: v for k, v in line.items() if v is not None})


class DeadLetters:
    """`dlq_export` and `dlq_import` (mixed into `RunnerQ`)."""

    def __init__(self, ctx: QueueContext, queue: ActivityQueue, operator: Operator,
                 audit: AuditLog) -> None:
        self._ctx = ctx
        self._queue = queue
        self._operator = operator
        self._audit = audit

    def dlq_export(self, types: Iterable[str] | None = None, since: datetime | None = None,
                   max_count: int | None = None) -> Iterator[dict[str, Any]]:
        """Exported lines, oldest dead-lettering first. Reads only.

        The activities in status dead_letter come first (the truth, even before
        their dead-letter record is written); then the dead-letter records of
        activities that retention has removed since (kept until an operator acts).
        """
        if max_count is not None and max_count < 1:
            raise InvalidArgument("--max must be at least 1")
        type_list = [t for t in (types or ()) if t]
        query: dict[str, Any] = {"status": Status.DEAD_LETTER.value}
        if type_list:
            query["activity_type"] = {"$in": type_list}
        if since is not None:
            query["completed_at"] = {"$gte": since}
        left = max_count
        cursor = self._ctx.activities.find(query, {"outbox": 0}).sort(
            [("completed_at", 1), ("_id", 1)])
        if left is not None:
            cursor = cursor.limit(left)
        queue = self._ctx.settings.queue
        for doc in well_formed(cursor, ACTIVITY, self._ctx.activities.name):
            yield export_line(doc, doc.get("last_error"), doc.get("completed_at"), queue)
            if left is not None:
                left -= 1
        if left is not None and left <= 0:
            return
        yield from self._aged_out_records(type_list, since, left)

    def _aged_out_records(self, types: list[str], since: datetime | None,
                          left: int | None) -> Iterator[dict[str, Any]]:
        query: dict[str, Any] = {}
        if types:
            query["activity.activity_type"] = {"$in": types}
        if since is not None:
            query["failed_at"] = {"$gte": since}
        batch: list[dict[str, Any]] = []
        queue = self._ctx.settings.queue

        def flush() -> Iterator[dict[str, Any]]:
            present = {d["_id"] for d in self._ctx.activities.find(
                {"_id": {"$in": [r["_id"] for r in batch]}}, {"_id": 1})}
            for record in batch:
                if record["_id"] not in present and isinstance(record.get("activity"), dict) \
                        and ACTIVITY.problem({**record["activity"], "_id": record["_id"]}) is None:
                    yield export_line({**record["activity"], "_id": record["_id"]},
                                      record.get("error"), record.get("failed_at"), queue)
            batch.clear()

        for record in self._ctx.dead_letter.find(query).sort([("failed_at", 1), ("_id", 1)]):
            batch.append(record)
            if len(batch) >= 200:
                for line in flush():
                    if left is not None and left <= 0:
                        return
                    yield line
                    left = None if left is None else left - 1
        for line in flush():
            if left is not None and left <= 0:
                return
            yield line
            left = None if left is None else left - 1

    def dlq_import(self, lines: Iterable[ImportLine], *, redrive: bool = False,
                   dry_run: bool = False, reason: str | None = None,
                   actor: str | None = None) -> list[ImportOutcome]:
        """Enqueue (or, `redrive`, revive) each line; one outcome per line, in order.

        A dry run reads (is the key held? does the original exist?) and writes nothing.
        """
        from runnerq_cli.backend.audit import default_actor

        actor = actor or default_actor()
        outcomes: list[ImportOutcome] = []
        for item in lines:
            if item.error is not None or item.spec is None:
                outcomes.append(ImportOutcome(item.line, "invalid", item.original_id,
                                              reason=item.error or "no activity"))
            elif redrive:
                outcomes.append(self._import_redrive(item, dry_run, reason, actor))
            else:
                outcomes.append(self._import_enqueue(item, dry_run))
        done = [o.id for o in outcomes if o.id is not None
                and o.outcome in ("enqueued", "redriven")]
        if not dry_run and done:
            counts: dict[str, int] = {}
            for o in outcomes:
                counts[o.outcome] = counts.get(o.outcome, 0) + 1
            self._audit.record_action("dlq-import", done, reason=reason,
                               actor=actor, mode="redrive" if redrive else "enqueue",
                               outcomes=counts)
        return outcomes

    def _import_enqueue(self, item: ImportLine, dry_run: bool) -> ImportOutcome:
        spec = item.spec
        assert spec is not None
        if item.original_id is not None:
            spec = dataclasses.replace(
                spec, metadata={**spec.metadata, LINK_KEY: str(item.original_id)},
                idempotency_key=spec.idempotency_key or str(item.original_id))
        if dry_run:
            holder = self._key_holder(spec)
            if holder is not None:
                return ImportOutcome(item.line, "existing", item.original_id, holder,
                                     "already imported (idempotency key held)")
            return ImportOutcome(item.line, "would_enqueue", item.original_id)
        try:
            result = self._queue.enqueue(spec)
        except (DuplicateActivity, IdempotencyConflict) as exc:
            return ImportOutcome(item.line, "conflict", item.original_id,
                                 getattr(exc, "existing_id", None), str(exc))
        if result.created:
            return ImportOutcome(item.line, "enqueued", item.original_id, result.activity_id)
        return ImportOutcome(item.line, "existing", item.original_id, result.activity_id,
                             "already imported (idempotency key held): nothing enqueued")

    def _key_holder(self, spec: ActivitySpec) -> uuid.UUID | None:
        """The activity holding `spec`'s idempotency key, if the key is held and not expired."""
        if spec.idempotency_key is None:
            return None
        held = self._ctx.idempotency.find_one(
            {"_id": {"activity_type": spec.activity_type, "key": spec.idempotency_key}})
        if held is None:
            return None
        ttl = timedelta(seconds=self._ctx.settings.idempotency_ttl)
        if held["created_at"] + ttl <= self._ctx.clock():
            return None
        return held["activity_id"]

    def _import_redrive(self, item: ImportLine, dry_run: bool, reason: str | None,
                        actor: str | None) -> ImportOutcome:
        aid = item.original_id
        if aid is None:
            return ImportOutcome(item.line, "invalid",
                                 reason="no original_id: --redrive revives originals by id")
        doc = self._ctx.activities.find_one({"_id": aid}, {"status": 1})
        if doc is None:
            return ImportOutcome(item.line, "not_found", aid,
                                 reason=f"activity {aid} is not in this queue")
        status = doc.get("status")
        if status != Status.DEAD_LETTER.value:
            return ImportOutcome(item.line, "skipped", aid, aid,
                                 f"it is {status}, not dead-lettered (redriven already?)")
        if dry_run:
            return ImportOutcome(item.line, "would_redrive", aid, aid)
        before = self._operator.redrive_one(aid, reason=reason, actor=actor)
        if before is None:
            return ImportOutcome(item.line, "skipped", aid, aid, "it changed meanwhile")
        self._operator.drop_dead_letter_record(before)
        return ImportOutcome(item.line, "redriven", aid, aid)

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
bad line does not stop the others. Lines are read and written in batches
(a fixed number of commands per batch, memory independent of the file's
size), and the import is audited before its first write (audit.py).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.import_lines import ImportLine
from runnerq_cli.backend.domain.keys import KeyPlan, key_digest
from runnerq_cli.backend.domain.models import Priority, Status, to_jsonable
from runnerq_cli.backend.domain.operator_text import check_text
from runnerq_cli.backend.domain.shapes import ACTIVITY, well_formed
from runnerq_cli.backend.domain.sizes import IMPORT_BATCH
from runnerq_cli.backend.ops.audit import AuditLog, AuditRun, default_actor
from runnerq_cli.backend.queue.intake import Batcher
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.ops.operator import Operator
    from runnerq_cli.backend.queue.queue import ActivityQueue, ActivitySpec

LINK_KEY = "redriven_from"  # metadata key naming the original activity


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


@dataclass
class ImportReport:
    """What an import did: counts per outcome, where it stopped, the outcomes if kept."""

    dry_run: bool = False
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    lines: int = 0
    last_line: int = 0
    interrupted: bool = False
    outcomes: list[ImportOutcome] = dataclasses.field(default_factory=list)

    def add(self, outcome: ImportOutcome, *, keep: bool) -> None:
        self.lines += 1
        self.counts[outcome.outcome] = self.counts.get(outcome.outcome, 0) + 1
        if keep:
            self.outcomes.append(outcome)


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
    exported: dict[str, Any] = to_jsonable({k: v for k, v in line.items() if v is not None})
    return exported


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
            raise InvalidArgument("max_count must be at least 1", "max_count")
        from runnerq_cli.filter_values import filter_terms

        type_list = list(filter_terms(types, "types"))
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
                   actor: str | None = None, batch_size: int = IMPORT_BATCH,
                   should_stop: Callable[[], bool] | None = None,
                   on_outcome: Callable[[ImportOutcome], None] | None = None,
                   on_batch: Callable[[ImportReport], None] | None = None,
                   command: str | None = None, collect: bool = True) -> ImportReport:
        """Enqueue (or, `redrive`, revive) each line, in batches; one outcome per line, in order.

        `lines` is read lazily, `batch_size` at a time or INPUT_BATCH_BYTES of them
        (intake.Batcher), so memory does not grow with the file (with
        `collect=False`; outcomes go to `on_outcome`). A batch costs a fixed number
        of commands (Enqueuer.enqueue_batch). A dry run reads (is the key held?
        does the original exist?), writes nothing, and decides `existing` and
        `conflict` as the real run would, including between lines of the same
        file: to do so it remembers each key its lines would take (16 bytes and a
        status each: about 150 bytes a line, the one memory that grows with the
        file). The audit record is written before the first write and updated
        after each batch; `should_stop` is asked after each line read: the batch
        in progress is done, then the import ends (`interrupted`, and the last
        line done).
        """
        check_text(reason, "reason")
        check_text(actor, "actor")
        report = ImportReport(dry_run=dry_run)
        planned: KeyPlan = {}  # dry run: the keys (and originals) its lines took so far
        run: AuditRun | None = None
        note = {"reason": reason, "actor": actor or default_actor()}

        def before_write() -> None:
            """The intent is recorded just before the first write (none: no record)."""
            nonlocal run
            if run is None:
                run = self._audit.begin("dlq-import", reason=reason, actor=actor,
                                        mode="redrive" if redrive else "enqueue",
                                        command=command)

        batches = Batcher(lines, size=batch_size, size_of=_line_size, should_stop=should_stop)
        try:
            for batch in batches:
                if redrive:
                    outcomes = self._redrive_batch(batch, dry_run, note, planned,
                                                   before_write)
                else:
                    outcomes = self._enqueue_batch(batch, dry_run, planned, before_write)
                for outcome in outcomes:
                    report.add(outcome, keep=collect)
                    if on_outcome is not None:
                        on_outcome(outcome)
                report.last_line = batch[-1].line
                done = [o.id for o in outcomes if o.id is not None
                        and o.outcome in ("enqueued", "redriven")]
                if run is not None:
                    run.progress(done, outcomes=dict(report.counts),
                                 last_line=report.last_line)
                if on_batch is not None:
                    on_batch(report)
        except BaseException as exc:
            if run is not None:
                run.__exit__(type(exc), exc, None)
            raise
        report.interrupted = batches.stopped
        if run is not None:
            run.finish("interrupted" if report.interrupted else "done",
                       outcomes=dict(report.counts), last_line=report.last_line)
        return report

    # ------------------------------------------------------------ enqueue mode

    def _enqueue_batch(self, batch: list[ImportLine], dry_run: bool, planned: KeyPlan,
                       before_write: Callable[[], None]) -> list[ImportOutcome]:
        """One batch of copies through the queue's batched enqueue (its rules of keys):
        a fixed number of commands whatever its size."""
        valid = [(index, _linked(item)) for index, item in enumerate(batch)
                 if item.spec is not None and item.error is None]
        results = self._queue.enqueue_batch(
            [spec for _, spec in valid], dry_run=dry_run, plan=planned,
            before_write=before_write) if valid else []
        outcome_of = {index: result for (index, _), result in zip(valid, results, strict=True)}
        out: list[ImportOutcome] = []
        for index, item in enumerate(batch):
            result = outcome_of.get(index)
            if result is None:
                out.append(ImportOutcome(item.line, "invalid", item.original_id,
                                         reason=item.error or "no activity"))
            else:
                kind, reason = _IMPORT_KINDS[result.kind]
                out.append(ImportOutcome(item.line, kind, item.original_id, result.activity_id,
                                         reason or (str(result.error) if result.error
                                                    else None)))
        return out

    # ------------------------------------------------------------ redrive mode

    def _redrive_batch(self, batch: list[ImportLine], dry_run: bool, note: dict[str, Any],
                       planned: KeyPlan,
                       before_write: Callable[[], None]) -> list[ImportOutcome]:
        """Revive the originals of one batch: one read, then one batch of redrives."""
        from runnerq_cli.backend.ops.batches import Batches

        wanted = list({i.original_id for i in batch if i.error is None and i.spec is not None
                       and i.original_id is not None})
        status_of: dict[Any, str] = {}
        if wanted:
            status_of = {d["_id"]: str(d.get("status")) for d in self._ctx.activities.find(
                {"_id": {"$in": wanted}}, {"status": 1}).batch_size(len(wanted) + 1)}
        outcomes: dict[int, ImportOutcome] = {}
        chosen: dict[uuid.UUID, int] = {}
        for index, item in enumerate(batch):
            aid = item.original_id
            if item.error is not None or item.spec is None:
                outcomes[index] = ImportOutcome(item.line, "invalid", aid,
                                                reason=item.error or "no activity")
                continue
            if aid is None:
                outcomes[index] = ImportOutcome(
                    item.line, "invalid", reason="no original_id: --redrive revives originals "
                                                 "by id")
                continue
            if aid not in status_of:
                outcomes[index] = ImportOutcome(item.line, "not_found", aid,
                                                reason=f"activity {aid} is not in this queue")
                continue
            done_before = key_digest("redrive", str(aid))
            status = status_of[aid]
            if aid in chosen or (dry_run and done_before in planned):
                status = Status.PENDING.value  # an earlier line revives it
            if status != Status.DEAD_LETTER.value:
                outcomes[index] = ImportOutcome(
                    item.line, "skipped", aid, aid,
                    f"it is {status}, not dead-lettered (redriven already?)")
                continue
            chosen[aid] = index
            if dry_run:
                planned[done_before] = (aid, Status.PENDING.value)
                outcomes[index] = ImportOutcome(item.line, "would_redrive", aid, aid)
        if chosen and not dry_run:
            before_write()
            done = Batches(self._ctx).run("redrive", list(chosen), note=note)
            for result in done.applied:
                index = chosen[result.activity_id]
                outcomes[index] = ImportOutcome(batch[index].line, "redriven",
                                                result.activity_id, result.activity_id)
            for skip, _ in done.skipped:
                index = chosen[skip["id"]]
                outcomes[index] = ImportOutcome(batch[index].line, "skipped", skip["id"],
                                                skip["id"], "it changed meanwhile")
        return [outcomes[i] for i in range(len(batch)) if i in outcomes]


# ------------------------------------------------------------------ helpers


def _line_size(item: ImportLine) -> int:
    return item.size


def _linked(item: ImportLine) -> ActivitySpec:
    """The copy's spec: linked to its original, keyed by it unless the line has a key."""
    spec = item.spec
    assert spec is not None
    if item.original_id is None:
        return spec
    return dataclasses.replace(
        spec, metadata={**spec.metadata, LINK_KEY: str(item.original_id)},
        idempotency_key=spec.idempotency_key or str(item.original_id))


# An enqueue outcome as an import outcome: (its name here, its reason if fixed).
_IMPORT_KINDS = {
    "enqueued": ("enqueued", None),
    "would_enqueue": ("would_enqueue", None),
    "existing": ("existing", "already imported (idempotency key held): nothing enqueued"),
    "duplicate": ("conflict", None),
    "not_failed": ("conflict", None),
    "refused": ("invalid", None),
}

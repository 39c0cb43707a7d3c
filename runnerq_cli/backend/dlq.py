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
import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pymongo.errors import BulkWriteError

from runnerq_cli.backend.audit import AuditLog, AuditRun, check_text, default_actor
from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.enqueueing import ORPHAN_KEY_GRACE
from runnerq_cli.backend.models import OnDuplicate, Priority, Status, to_jsonable
from runnerq_cli.backend.shapes import ACTIVITY, well_formed
from runnerq_cli.backend.sizes import IMPORT_BATCH
from runnerq_cli.backend.writes import DUPLICATE_KEY
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
    size: int = 0  # bytes of the line (a batch is bounded in bytes too)


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


# A batch also ends at this many bytes of lines: what one batch holds in memory (its
# lines, their decoded payloads, their BSON) stays a few times this, whatever the file.
IMPORT_BATCH_BYTES = 4 * 1024 * 1024


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
                   actor: str | None = None, batch_size: int = IMPORT_BATCH,
                   should_stop: Callable[[], bool] | None = None,
                   on_outcome: Callable[[ImportOutcome], None] | None = None,
                   on_batch: Callable[[ImportReport], None] | None = None,
                   command: str | None = None, collect: bool = True) -> ImportReport:
        """Enqueue (or, `redrive`, revive) each line, in batches; one outcome per line, in order.

        `lines` is read lazily, `batch_size` at a time, so memory does not grow
        with the file (with `collect=False`; outcomes go to `on_outcome`). A
        batch costs a fixed number of commands (see `_enqueue_batch`). A dry
        run reads (is the key held? does the original exist?), writes nothing,
        and decides `existing` and `conflict` as the real run would, including
        between lines of the same file. The audit record is written before the
        first write and updated after each batch; `should_stop` is asked between
        batches (the report then says `interrupted` and the last line reached).
        """
        if not 1 <= batch_size <= 10_000:
            raise InvalidArgument("batch size must be between 1 and 10000")
        check_text(reason, "reason")
        check_text(actor, "actor")
        report = ImportReport(dry_run=dry_run)
        planned: dict[bytes, tuple[uuid.UUID | None, str]] = {}  # dry run: keys taken so far
        run: AuditRun | None = None
        note = {"reason": reason, "actor": actor or default_actor()}

        def before_write() -> None:
            """The intent is recorded just before the first write (none: no record)."""
            nonlocal run
            if run is None:
                run = self._audit.begin("dlq-import", reason=reason, actor=actor,
                                        mode="redrive" if redrive else "enqueue",
                                        command=command)

        try:
            for batch in _batches(lines, batch_size):
                if should_stop is not None and should_stop():
                    report.interrupted = True
                    break
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
        if run is not None:
            run.finish("interrupted" if report.interrupted else "done",
                       outcomes=dict(report.counts), last_line=report.last_line)
        return report

    # ------------------------------------------------------------ enqueue mode

    def _enqueue_batch(self, batch: list[ImportLine], dry_run: bool,
                       planned: dict[bytes, tuple[uuid.UUID | None, str]],
                       before_write: Callable[[], None]) -> list[ImportOutcome]:
        """One batch of copies: 2 reads (keys held, their holders), 2 writes (the keys
        taken, the activities), whatever its size. Lines whose key needs a change of
        holder (expired, orphaned, allow-reuse) go one by one through the queue's own
        keyed enqueue, in order, with every later line of the same key."""
        ctx = self._ctx
        now = ctx.clock()
        specs: dict[int, ActivitySpec] = {}
        for index, item in enumerate(batch):
            if item.spec is not None and item.error is None:
                specs[index] = _linked(item)
        key_ids = list({_key_digest(s): _key_id(s) for s in specs.values()
                        if s.idempotency_key is not None}.values())
        held: dict[bytes, dict[str, Any]] = {}
        if key_ids:
            for doc in ctx.idempotency.find({"_id": {"$in": key_ids}}).batch_size(
                    len(key_ids) + 1):
                key = doc.get("_id") or {}
                held[_digest(key.get("activity_type"), key.get("key"))] = doc
        holder_ids = [d.get("activity_id") for d in held.values() if d.get("activity_id")]
        status_of: dict[Any, str] = {}
        if holder_ids:
            status_of = {d["_id"]: str(d.get("status")) for d in ctx.activities.find(
                {"_id": {"$in": holder_ids}}, {"status": 1}).batch_size(len(holder_ids) + 1)}
        ttl = timedelta(seconds=ctx.settings.idempotency_ttl)
        outcomes: dict[int, ImportOutcome] = {}
        taken: dict[bytes, tuple[uuid.UUID, str]] = {}  # keys this batch takes
        new_docs: dict[int, dict[str, Any]] = {}
        key_docs: dict[bytes, dict[str, Any]] = {}
        sequential: dict[int, ActivitySpec] = {}
        slow_keys: set[bytes] = set()

        def move_key(index: int, item: ImportLine, spec: ActivitySpec, digest: bytes) -> None:
            """The key changes holder: only the queue's keyed enqueue does that (one by one);
            a dry run predicts a new activity and notes the key as taken."""
            if dry_run:
                planned[digest] = (None, _first_status(spec, now))
                outcomes[index] = ImportOutcome(item.line, "would_enqueue", item.original_id)
            else:
                slow_keys.add(digest)
                sequential[index] = spec

        for index, item in enumerate(batch):
            spec = specs.get(index)
            if spec is None:
                outcomes[index] = ImportOutcome(item.line, "invalid", item.original_id,
                                                reason=item.error or "no activity")
                continue
            if spec.idempotency_key is None:
                new_docs[index] = self._queue.new_document(spec, uuid.uuid4(), now)
                continue
            digest = _key_digest(spec)
            if digest in slow_keys:
                sequential[index] = spec
                continue
            holder: tuple[uuid.UUID | None, str] | None = None
            if digest in taken:
                holder = taken[digest]
            elif dry_run and digest in planned:
                holder = planned[digest]
            elif digest in held:
                doc = held[digest]
                hid = doc.get("activity_id")
                created = doc.get("created_at")
                expired = isinstance(created, datetime) and created + ttl <= now
                orphan = (hid not in status_of and isinstance(created, datetime)
                          and created + ORPHAN_KEY_GRACE <= now)
                if not expired and not orphan:
                    holder = (hid, status_of.get(hid, Status.PENDING.value))
            elif digest not in held:
                holder = None
            if holder is None and digest in held:  # expired or orphaned: the key moves
                move_key(index, item, spec, digest)
                continue
            if holder is None:  # free: this line takes it
                new_id = uuid.uuid4()
                doc = self._queue.new_document(spec, new_id, now)
                taken[digest] = (new_id, doc["status"])
                new_docs[index] = doc
                key_docs[digest] = {"_id": _key_id(spec), "activity_id": new_id,
                                    "created_at": now, **_key_id(spec)}
                continue
            verdict = _on_held(spec, holder)
            if verdict == "move":  # allow-reuse: the key moves to a new activity
                move_key(index, item, spec, digest)
                continue
            outcomes[index] = _held_outcome(item, verdict, holder, spec)
        if dry_run:
            for index in new_docs:
                item = batch[index]
                outcomes[index] = ImportOutcome(item.line, "would_enqueue", item.original_id)
            for digest, (_, status) in taken.items():
                planned[digest] = (None, status)
            return [outcomes[i] for i in range(len(batch)) if i in outcomes]
        if new_docs or sequential:
            before_write()
        # Keys first, activities second (as the queue's keyed enqueue: a crash in
        # between leaves orphan keys, taken over after ORPHAN_KEY_GRACE).
        lost = self._insert_keys(key_docs)
        for index in list(new_docs):
            spec = specs[index]
            if spec.idempotency_key is not None and _key_digest(spec) in lost:
                del new_docs[index]  # another writer took the key meanwhile
                sequential[index] = spec
        if lost:  # every later line of a lost key decided on it: ask again, in order
            for index, outcome in list(outcomes.items()):
                spec = specs.get(index)
                if spec is not None and spec.idempotency_key is not None and \
                        _key_digest(spec) in lost and outcome.outcome in ("existing",
                                                                          "conflict"):
                    del outcomes[index]
                    sequential[index] = spec
        failed = self._insert_activities(list(new_docs.values()))
        for index, doc in new_docs.items():
            item = batch[index]
            if doc["_id"] in failed:
                outcomes[index] = ImportOutcome(item.line, "invalid", item.original_id,
                                                reason=failed[doc["_id"]])
            else:
                outcomes[index] = ImportOutcome(item.line, "enqueued", item.original_id,
                                                doc["_id"])
        for index in sorted(sequential):
            outcomes[index] = self._enqueue_one(batch[index], sequential[index])
        return [outcomes[i] for i in range(len(batch)) if i in outcomes]

    def _insert_keys(self, key_docs: dict[bytes, dict[str, Any]]) -> set[bytes]:
        """Take the keys (one insert_many); returns those another writer holds."""
        if not key_docs:
            return set()
        order = list(key_docs)
        try:
            self._ctx.idempotency.insert_many(list(key_docs.values()), ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if any(e.get("code") != DUPLICATE_KEY for e in errors):
                raise
            return {order[e["index"]] for e in errors}
        return set()

    def _insert_activities(self, docs: list[dict[str, Any]]) -> dict[uuid.UUID, str]:
        """Insert the copies as the queue's enqueue does (stamped by the server, so a tail
        positions their Enqueued events by the write); returns the refused ones."""
        from runnerq_cli.backend.writes import stamped_inserts

        if not docs:
            return {}
        errors = stamped_inserts(self._ctx.activities, docs, "created_at", self._ctx.clock,
                                 self._ctx.clock())
        return {docs[index]["_id"]: str(error.get("errmsg", "rejected"))
                for index, error in errors.items()}

    def _enqueue_one(self, item: ImportLine, spec: ActivitySpec) -> ImportOutcome:
        """A line whose key must change holder: the queue's own keyed enqueue."""
        try:
            result = self._queue.enqueue(spec)
        except (DuplicateActivity, IdempotencyConflict) as exc:
            return ImportOutcome(item.line, "conflict", item.original_id,
                                 getattr(exc, "existing_id", None), str(exc))
        if result.created:
            return ImportOutcome(item.line, "enqueued", item.original_id, result.activity_id)
        return ImportOutcome(item.line, "existing", item.original_id, result.activity_id,
                             "already imported (idempotency key held): nothing enqueued")

    # ------------------------------------------------------------ redrive mode

    def _redrive_batch(self, batch: list[ImportLine], dry_run: bool, note: dict[str, Any],
                       planned: dict[bytes, tuple[uuid.UUID | None, str]],
                       before_write: Callable[[], None]) -> list[ImportOutcome]:
        """Revive the originals of one batch: one read, then one batch of redrives."""
        from runnerq_cli.backend.batches import Batches

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
            done_before = _digest("redrive", str(aid))
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


def parse_import_line(number: int, raw: str | bytes) -> ImportLine:
    """One line of an import file: its spec and original id, or why it is refused.

    Invalid UTF-8, malformed JSON and nesting beyond the limit refuse this
    line alone (values.json_value), like `enqueue --from`.
    """
    from runnerq_cli import values
    from runnerq_cli.backend.models import parse_activity_id
    from runnerq_cli.backend.specs import spec_from_data

    original = None
    try:
        data = values.json_value(raw, "")
        if isinstance(data, dict) and data.get("original_id") is not None:
            original = parse_activity_id(str(data["original_id"]))
        return ImportLine(number, original, spec_from_data(data, {}), size=len(raw))
    except InvalidArgument as exc:
        return ImportLine(number, original, error=str(exc), size=len(raw))


def _batches(lines: Iterable[ImportLine], size: int,
             max_bytes: int = IMPORT_BATCH_BYTES) -> Iterator[list[ImportLine]]:
    """`size` lines at a time, fewer when they reach `max_bytes` (big payloads)."""
    batch: list[ImportLine] = []
    held = 0
    for item in lines:
        batch.append(item)
        held += item.size
        if len(batch) >= size or held >= max_bytes:
            yield batch
            batch = []
            held = 0
    if batch:
        yield batch


def _linked(item: ImportLine) -> ActivitySpec:
    """The copy's spec: linked to its original, keyed by it unless the line has a key."""
    spec = item.spec
    assert spec is not None
    if item.original_id is None:
        return spec
    return dataclasses.replace(
        spec, metadata={**spec.metadata, LINK_KEY: str(item.original_id)},
        idempotency_key=spec.idempotency_key or str(item.original_id))


def _key_id(spec: ActivitySpec) -> dict[str, str]:
    assert spec.idempotency_key is not None
    return {"activity_type": spec.activity_type, "key": spec.idempotency_key}


def _digest(*parts: Any) -> bytes:
    """A short fixed-size name for a key (a dry run remembers keys, not their text)."""
    text = "\x00".join(str(p) for p in parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()


def _key_digest(spec: ActivitySpec) -> bytes:
    return _digest(spec.activity_type, spec.idempotency_key)


def _first_status(spec: ActivitySpec, now: datetime) -> str:
    return Status.SCHEDULED.value if spec.due_at(now) else Status.PENDING.value


def _on_held(spec: ActivitySpec, holder: tuple[uuid.UUID | None, str]) -> str:
    """What the line's `on_duplicate` does with a held key, as queue._enqueue_idempotent."""
    behaviour = spec.on_duplicate
    status = holder[1]
    if behaviour is OnDuplicate.RETURN_EXISTING:
        return "existing"
    if behaviour is OnDuplicate.NO_REUSE:
        return "duplicate"
    if behaviour is OnDuplicate.ALLOW_REUSE_ON_FAILURE and status not in (
            Status.FAILED.value, Status.DEAD_LETTER.value):
        return "not_failed"
    return "move"


def _held_outcome(item: ImportLine, verdict: str, holder: tuple[uuid.UUID | None, str],
                  spec: ActivitySpec) -> ImportOutcome:
    hid, status = holder
    who = str(hid) if hid is not None else "an earlier line of this file"
    if verdict == "existing":
        return ImportOutcome(item.line, "existing", item.original_id, hid,
                             "already imported (idempotency key held): nothing enqueued")
    if verdict == "duplicate":
        return ImportOutcome(item.line, "conflict", item.original_id, hid,
                             f"duplicate activity: idempotency key {spec.idempotency_key!r} "
                             f"is held by {who}")
    return ImportOutcome(item.line, "conflict", item.original_id, hid,
                         f"idempotency conflict: key {spec.idempotency_key!r} is held by "
                         f"{who}, which is {status}, not failed")

"""Enqueueing (docs/design.md, "Enqueue" and "Idempotency"): what a producer asks for
(`ActivitySpec`), the new activity document, and the writes of a batch of them (the
rules of idempotency keys are keys.py's).

A keyed enqueue takes the key first and inserts the activity second; a crash in
between leaves a key pointing at no activity, which the next enqueue with that key
takes over once ORPHAN_KEY_GRACE has passed. The keys' reads and writes, and a
debounce's update, are keyed.py's: loaded only for a batch that has such a spec, so a
plain enqueue does not compile them (benchmarks/bench_cli_startup.py, uncached byte-code).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runnerq_cli import values
from runnerq_cli.backend.domain.models import (
    AWAITED,
    SPAWN_FENCE,
    EnqueueResult,
    Status,
)
from runnerq_cli.backend.domain.outcomes import Outcome
from runnerq_cli.backend.domain.partitions import of_key
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.domain.tracecontext import FIELD as TRACE_FIELD
from runnerq_cli.backend.store.context import Part
from runnerq_cli.backend.store.servertime import When, write_time
from runnerq_cli.backend.store.stamps import stamped_inserts
from runnerq_cli.errors import IdempotencyConflict, InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.keys import KeyPlan


class Enqueuer(Part):
    """New activities on one queue: plain inserts in few commands, keyed ones through the
    idempotency collection, a batch at a time (`enqueue`, `enqueue --from` and
    `dlq import` all come here: the rules of keys are `decide`'s alone)."""

    def enqueue(self, activity_type: str | ActivitySpec, payload: Mapping[str, Any] | None = None,
                **options: Any) -> EnqueueResult:
        """Put one activity on the queue (see `ActivitySpec` for the options)."""
        spec = activity_type if isinstance(activity_type, ActivitySpec) else ActivitySpec(
            activity_type, payload if payload is not None else {}, **options)
        [result] = self.enqueue_many([spec])
        if isinstance(result, Exception):
            raise result
        return result

    def enqueue_many(self, specs: Sequence[ActivitySpec]) -> list[EnqueueResult | Exception]:
        """Enqueue many in few round trips; one entry per spec, in order: its result, or
        the error (DuplicateActivity, IdempotencyConflict, InvalidArgument when the server
        refused it) where it failed. Server outages raise."""
        at = write_time(self._ctx.clock)
        replaced: dict[int, uuid.UUID | None] = {}
        if any(spec.debounce_seconds is not None for spec in specs):  # (design.md, "Debounce")
            from runnerq_cli.backend.queue.keyed import debounced

            replaced = debounced(self._ctx, specs, at)
        rest = [spec for i, spec in enumerate(specs) if replaced.get(i) is None]
        results = iter(outcome.result() for outcome in self.enqueue_batch(rest))
        return [EnqueueResult(found, False, Status.SCHEDULED.value) if found is not None
                else next(results) for found in (replaced.get(i) for i in range(len(specs)))]

    def enqueue_batch(self, specs: Sequence[ActivitySpec], *, dry_run: bool = False,
                      plan: KeyPlan | None = None,
                      before_write: Callable[[], None] | None = None) -> list[Outcome]:
        """One outcome per spec, in order, in a few commands whatever the batch's size.

        Plain specs: inserted, INSERT_CHUNK a command. Keyed specs: the keys first (one
        insert of every key the batch names; those another holds fail alone), the
        activities second, so a crash in between leaves orphan keys (taken over after
        ORPHAN_KEY_GRACE). The keys found held are read (two reads: the keys, their
        holders) and each spec decided by `decide`, in order: a later spec of the same
        key sees the earlier one's activity. A key that must change holder goes one by
        one, with every later spec of its key (`_enqueue_keyed_one`).

        `dry_run` writes nothing and decides as the real run would; `plan` carries the
        keys a dry run's earlier batches would take. `before_write` is called once,
        before the first write.
        """
        # What keys' ages and a dry run's statuses are judged by: the server's clock, read
        # (a `hello` the first time in a process) only when a key or a dry run needs it; a
        # plain enqueue's times are the server's own ($$NOW), so it sends one command less.
        judged = dry_run or any(spec.idempotency_key is not None for spec in specs)
        now = self._ctx.clock() if judged else datetime.now(UTC)  # (then unused)
        if judged:  # the key rules (keys.py): a plain batch does not load them
            from runnerq_cli.backend.domain.keys import digest_of, first_status
        at = write_time(self._ctx.clock)  # what the writes set: the server's $$NOW
        out: dict[int, Outcome] = {}
        new_docs: dict[int, dict[str, Any]] = {}
        groups: dict[bytes, list[int]] = {}
        for index, spec in enumerate(specs):
            if spec.idempotency_key is None:
                if dry_run:
                    out[index] = Outcome("would_enqueue", None, first_status(spec, now))
                else:
                    new_docs[index] = self.new_document(spec, _new_id(spec), at)
            else:
                groups.setdefault(digest_of(spec), []).append(index)
        started: list[bool] = []

        def writing() -> None:
            """Before the first write: the caller's hook, once."""
            if not started:
                started.append(True)
                if before_write is not None:
                    before_write()

        sequential: list[int] = []
        if groups:  # the keys first (keyed.py: loaded only for a batch with keys)
            from runnerq_cli.backend.queue.keyed import settle_keys

            firsts = {digest: self.new_document(specs[indexes[0]], _new_id(specs[indexes[0]]),
                                                at) for digest, indexes in groups.items()}
            # A caller that records its writes (an audited import) or writes nothing reads
            # the keys first, so a rerun that finds them all held writes (and records)
            # nothing; else every key's first spec just tries to take it (a free key is
            # anyone's): one command fewer for the common case, a new key.
            sequential = settle_keys(self._ctx, specs, groups, firsts, now, out=out,
                                     new_docs=new_docs, plan=plan if dry_run else None,
                                     dry_run=dry_run,
                                     read_first=dry_run or before_write is not None,
                                     writing=writing)
        if not dry_run:
            if new_docs or sequential:
                writing()
            self._write_activities(specs, new_docs, sequential, out, at)
        return [out[index] for index in range(len(specs))]

    def _write_activities(self, specs: Sequence[ActivitySpec],
                          new_docs: dict[int, dict[str, Any]], sequential: Iterable[int],
                          out: dict[int, Outcome], at: When) -> None:
        """The batch's writes after its keys: the new documents in few inserts (a refused
        one frees its key again), then each spec whose key changes holder, one by one."""
        refused = self._insert_activities(list(new_docs.values()), at)
        for index, doc in new_docs.items():
            if doc["_id"] in refused:
                if specs[index].idempotency_key is not None:
                    from runnerq_cli.backend.queue.keyed import release_key

                    release_key(self._ctx, specs[index], doc["_id"])
                out[index] = Outcome("refused", None, doc["status"],
                                     InvalidArgument(refused[doc["_id"]]))
            else:
                out[index] = Outcome("enqueued", doc["_id"], doc["status"])
        if not sequential:
            return
        from runnerq_cli.backend.queue.keyed import enqueue_one

        for index in sorted(sequential):
            try:
                out[index] = enqueue_one(self._ctx, specs[index], _new_id, self._insert_keyed)
            except IdempotencyConflict as exc:  # contended: this spec alone
                out[index] = Outcome("not_failed", None, Status.PENDING.value, exc)

    def new_document(self, spec: ActivitySpec, activity_id: uuid.UUID,
                     now: When) -> dict[str, Any]:
        """The activity document an enqueue inserts (dlq import inserts the same)."""
        # No event is stored: Enqueued/Scheduled are derived from created_at (derived.py),
        # which the insert stamps (stamps.stamped_inserts): it is not in the document here.
        # A delay counts from the time the write sets: the server's $$NOW (servertime.py).
        due = spec.due_at(now if isinstance(now, datetime) else self._ctx.clock, now)
        status = Status.SCHEDULED if due else Status.PENDING
        doc: dict[str, Any] = {
            "_id": activity_id,
            "activity_type": spec.activity_type,
            "payload": dict(spec.payload),
            "priority": int(spec.priority),
            "status": status.value,
            "retry_count": 0,
            "max_retries": spec.max_retries,
            "timeout_seconds": spec.timeout_seconds,
            "retry_delay_seconds": spec.retry_delay_seconds,
            "metadata": dict(spec.metadata),
        }
        if due:
            doc["scheduled_at"] = due
        if spec.idempotency_key is not None:
            doc["idempotency_key"] = spec.idempotency_key
        if spec.key is not None:  # flow control's key (docs/design.md, "Keys")
            doc["flow_key"] = spec.key
            if spec.debounce_seconds is not None:
                doc["debounce"] = True
        count = self._ctx.partitions.current()
        if count > 1:  # a partitioned queue (docs/design.md, "The partition field")
            doc["partition"] = self._ctx.partitions.enqueues.take(count) \
                if spec.idempotency_key is None \
                else of_key(spec.activity_type, spec.idempotency_key, count)
        if spec.trace_context:
            doc[TRACE_FIELD] = dict(spec.trace_context)
        lineage(doc, spec)
        return doc

    # ------------------------------------------------------------ the batch's commands

    def _insert_activities(self, docs: list[dict[str, Any]],
                           now: When) -> dict[uuid.UUID, str]:
        """Insert with `created_at` stamped by the server (writes.stamped_inserts; `now`
        where the clock is the caller's own); returns the refused ones' reasons, cut (a
        refusal may quote the document)."""
        if not docs:
            return {}
        errors = stamped_inserts(self._ctx.activities, docs, "created_at", self._ctx.clock,
                                 now)
        return {docs[index]["_id"]: values.shown(str(error.get("errmsg", "rejected")))[1:-1]
                for index, error in errors.items()}

    # ------------------------------------------------------------ one key at a time

    def check_idempotency(self, activity_type: str, key: str,
                          activity_id: uuid.UUID) -> tuple[bool, uuid.UUID]:
        """Atomically take `key` for `activity_id`: (True, activity_id) if taken,
        else (False, holder). Keys past the TTL count as free (keyed.py)."""
        from runnerq_cli.backend.queue.keyed import check_idempotency

        return check_idempotency(self._ctx, activity_type, key, activity_id)

    def key_holder(self, activity_type: str, key: str) -> uuid.UUID | None:
        """The activity holding the idempotency key `key` of `activity_type`, or None when
        no one does (a key past `idempotency_ttl` is free, as enqueues judge it). RunnerQ's
        `lookup_key` (keyed.py)."""
        from runnerq_cli.backend.queue.keyed import key_holder

        return key_holder(self._ctx, activity_type, key)

    def _insert_keyed(self, spec: ActivitySpec, activity_id: uuid.UUID) -> Outcome:
        """The activity of a key just taken; a refused one frees its key again."""
        now = write_time(self._ctx.clock)
        doc = self.new_document(spec, activity_id, now)
        refused = self._insert_activities([doc], now)
        if refused:
            from runnerq_cli.backend.queue.keyed import release_key

            release_key(self._ctx, spec, activity_id)
            return Outcome("refused", None, doc["status"], InvalidArgument(refused[activity_id]))
        return Outcome("enqueued", activity_id, doc["status"])


def _new_id(spec: ActivitySpec) -> uuid.UUID:
    """The id a spec asks for, else a new random one."""
    return spec.activity_id or uuid.uuid4()


def lineage(doc: dict[str, Any], spec: ActivitySpec) -> None:
    """A child's fields (docs/design.md, "New fields of the activity document"): none on a
    plain activity. A fenced spawn inserts its child `waiting`, with no wake time, until
    the spawn confirms the fence (queue/durable.py)."""
    if spec.parent_id is not None:
        doc["parent_activity_id"] = spec.parent_id
        doc[AWAITED] = True  # its parent may wait on it: its publication wakes
    if spec.root_id is not None and spec.root_id != doc["_id"]:
        doc["root_activity_id"] = spec.root_id
    if spec.depth:
        doc["depth"] = spec.depth
    if spec.spawn_fence is not None:
        doc["status"] = Status.WAITING.value
        doc[SPAWN_FENCE] = spec.spawn_fence

"""Keeping a queue healthy: the scheduler, the reaper, outbox repair and retention.

Every worker runs these chores (shared across the live fleet, worker/engine.py),
and `purge` runs retention on an operator's request. Each is one indexed,
fenced operation that is cheap when nothing is due, so no leader is needed and
a dead worker stops nothing.

Each logs what it did, when it did anything, at INFO on the `runnerq.backend`
logger (the scheduler at DEBUG: it moves retries due every second), with the
counts as the record's `fields`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pymongo import ReturnDocument

from runnerq_cli import texts
from runnerq_cli.backend import LOGGER_NAME
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.derived import attempt_events
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import UNSUCCESSFUL_STATUSES, MalformedDocument, Status
from runnerq_cli.backend.domain.partitions import term as partition_term
from runnerq_cli.backend.domain.partitions import term_of
from runnerq_cli.backend.domain.rules import attempts_remain
from runnerq_cli.backend.domain.shapes import outbox_problem
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.backend.domain.waits import WAKE_UPDATE
from runnerq_cli.backend.queue.aside import checked, set_aside
from runnerq_cli.backend.queue.attempt_writes import (
    LEASE_FIELDS,
    dead_letter_update,
    flush_projection,
)
from runnerq_cli.backend.queue.durable import Durable
from runnerq_cli.backend.queue.flow_claims import free_slots
from runnerq_cli.backend.queue.queue import ActivityQueue
from runnerq_cli.backend.queue.tree_retention import TreeRetention
from runnerq_cli.backend.store.context import Part
from runnerq_cli.backend.store.servertime import past_now, server_update, write_time
from runnerq_cli.backend.store.statements import update_many_statements
from runnerq_cli.backend.store.writes import merge_updates, new_event, outbox_update
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.store.indexes import IndexReport

log = logging.getLogger(LOGGER_NAME)


def _os_user() -> str:
    """Who set the partition count, when no actor is given: the operating-system user."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no user name to be had (a container without a passwd entry)
        return "unknown"


@dataclass(frozen=True)
class PartitionChange:
    """What `set_partitions` did: the count before (0: a malformed one) and after, and the
    activities stamped `partition: 0` (or, not written, those that would be)."""

    before: int
    after: int
    stamped: int
    written: bool

    def to_json(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "stamped": self.stamped,
                "written": self.written}


# The `last_outcome` of a claim the reaper ended (docs/design.md, "Lease expiry"): not an
# acknowledgement's outcome, so no repeat of that claim answers from it.
EXPIRED = "expired"
# Outboxes one outbox repair copies at most (the next run takes the rest).
REPAIR_PAGE = 500


class QueueChores(Part):
    """The two chores of RunnerQ's queue trait (QueueBackend): the scheduler and the reaper."""

    def process_scheduled(self, limit: int | None = None) -> int:
        """Scheduled activities that are due become pending; returns how many."""
        now = self._ctx.clock()
        query = queries.due_scheduled(now).filter
        if limit is not None:
            ids = [d["_id"] for d in self._ctx.activities.find(query, {"_id": 1}).limit(limit)]
            query = {**query, "_id": {"$in": ids}}
        # One command, two statements: the due scheduled activities, and the parked ones
        # whose wait has come to its time (docs/design.md, "Claiming a woken activity").
        moved = update_many_statements(self._ctx.activities, [
            (query, {"$set": {"status": Status.PENDING.value}}),
            (queries.due_waits_query(now).filter, WAKE_UPDATE)])
        if moved:
            log.debug("scheduler: scheduled activities due",
                      extra={"fields": {"pending": moved}})
        return moved

    def requeue_expired(self, limit: int = 100) -> dict[str, int]:
        """The reaper: expired leases count as a retryable failure without back-off.

        Each activity is changed by one update fenced on the lease it had, so
        a worker that acknowledges at the same moment and the reaper cannot
        both win. A malformed one (docs/design.md, "Malformed documents") is
        dead-lettered as the claim does, and counted apart: one document never
        stops the pass. Returns {"requeued": n, "dead_lettered": m, "malformed": k}.
        """
        now = self._ctx.clock()  # the server's (servertime.ServerClock): an indexed range
        at = write_time(self._ctx.clock)  # what the updates write: the server's as they land
        expired = list(self._ctx.activities.find(
            queries.expired_leases(now).filter, {"payload": 0}).limit(limit))
        counts = {"requeued": 0, "dead_lettered": 0, "malformed": 0}
        for doc in self._ctx.activities.find(queries.unexpirable_leases().filter,
                                             {"payload": 0}).limit(limit):
            counts["malformed"] += self._set_aside(
                doc, checked(doc)[1] or "lease_deadline is missing while processing")
        for doc in expired:
            act, problem = checked({**doc, "payload": {}})
            if act is None:  # (the outbox read along: the update must be able to add to it)
                counts["malformed"] += self._set_aside(doc, str(problem))
                continue
            error = f"lease expired (worker {act.worker_id or 'unknown'})"
            if attempts_remain(act.retry_count, act.max_retries):
                kind = "requeued"
                event = new_event(act.id, act.activity_type, EventType.REQUEUED.value, at,
                                  act.worker_id, reason="lease_expired", error=error,
                                  retry_count=act.retry_count + 1, attempt=act.retry_count + 1,
                                  started_at=act.started_at, lease_deadline=act.lease_deadline)
                event["detail"]["previous_scheduled_at"] = act.scheduled_at
                attempt = [] if act.started_at is None else attempt_events(
                    act.id, act.activity_type, act.started_at, act.worker_id,
                    act.retry_count + 1, act.lease_deadline)
                # The attempt is over: started_at goes with the lease (its steps are stored).
                update = merge_updates(
                    # The expired claim is recorded (the spec's last_worker_id) with an
                    # outcome no repeat of it accepts: a late ack of it is a lost claim.
                    {"$set": {"status": Status.PENDING.value, "last_error": error,
                              "last_error_at": at, "last_lease_id": act.lease_id,
                              "last_outcome": EXPIRED},
                     "$unset": {**LEASE_FIELDS, "scheduled_at": "", "started_at": ""},
                     "$inc": {"retry_count": 1}},
                    outbox_update(at, [*attempt, event]))
            else:
                kind = "dead_lettered"
                update = dead_letter_update(act, error, at, act.worker_id, None)
            changed = self._ctx.activities.find_one_and_update(
                {"_id": act.id, **partition_term(act.partition),
                 "status": Status.PROCESSING.value, "lease_id": act.lease_id,
                 "lease_deadline": {"$lt": now}, **past_now(self._ctx.clock, "lease_deadline")},
                server_update(update), projection=flush_projection(update),
                return_document=ReturnDocument.AFTER)
            if changed is not None:
                self._ctx.outbox.submit(changed)
                counts[kind] += 1
                # The lease it ended held its slot, if limited: fenced on that lease.
                free_slots(self._ctx, [(doc.get("slot"), str(act.lease_id))])
        if any(counts.values()):
            log.info("reaper: expired leases", extra={"fields": counts})
        return counts

    def _set_aside(self, doc: dict[str, Any], problem: str) -> int:
        """Dead-letter a malformed running activity whose lease expired or can never expire,
        fenced on the lease as read (a holder that extends it meanwhile wins); 1 if done."""
        worker = doc.get("worker_id") if isinstance(doc.get("worker_id"), str) else None
        fence = {"_id": doc["_id"], **term_of(doc), "status": Status.PROCESSING.value,
                 "lease_id": doc.get("lease_id"), "lease_deadline": doc.get("lease_deadline")}
        return int(set_aside(self._ctx, doc, problem, fence, worker, None, "reaper"))


class Maintenance(QueueChores):
    """Every chore of one queue (the trait's two, outbox repair, retention) and its
    set-up."""

    def init_indexes(self, *, write: bool = True, drop_obsolete: bool = False,
                     partitions: int | None = None) -> list[IndexReport]:
        """Create the collections and indexes (idempotent); report each index.

        Indexes this version no longer uses are reported as obsolete, and
        dropped only with `drop_obsolete`. The plan is that of the queue's stored
        partition count, or of `partitions` (a count about to be set, or shown).
        """
        from runnerq_cli.backend.store.indexes import ensure_indexes

        return ensure_indexes(self._ctx.db, self._ctx.settings, write=write,
                              drop_obsolete=drop_obsolete,
                              partitions=self._ctx.partitions.current()
                              if partitions is None else partitions)

    def missing_activity_indexes(self) -> list[str]:
        """The planned indexes the activities collection lacks, by name (one listIndexes):
        a worker says so at start, since without them every claim, on a real server, is
        a scan of the whole collection, however few activities are pending. An index of
        the same keys under another name counts as present (doctor tells the rest)."""
        from runnerq_cli.backend.domain.index_specs import index_plan
        from runnerq_cli.backend.store.indexes import index_keys

        have = self._ctx.activities.list_indexes()
        names = {ix.get("name") for ix in have}
        keys = {index_keys(ix) for ix in have}
        return [spec.name for spec in index_plan(self._ctx.settings,
                                                 self._ctx.partitions.current())
                if spec.collection == "activities" and spec.name not in names
                and spec.keys not in keys]

    def set_partitions(self, count: int, *, write: bool = True,
                       actor: str | None = None) -> PartitionChange:
        """Make the queue one of `count` partitions (docs/design.md, "Changing N"): the
        count only grows (InvalidArgument below the stored one, nothing written); from 1,
        every activity without a partition (absent or null) is stamped `partition: 0`
        (again at every call: a producer that read the old count may have added some since).

        `write` False reports what would change and writes nothing."""
        from runnerq_cli.backend.domain.partitions import (
            FIELD,
            PARTITIONS_ID,
            check_count,
            count_of,
        )

        try:
            count = check_count(count)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        stored = self._ctx.partitions.read()
        try:
            before = count_of(stored)
        except MalformedDocument:  # the fix for a broken count is to set it again
            before = 0
        if count < before:
            raise InvalidArgument(
                f"the queue has {counted(before, 'partition')}; a queue's partitions can only grow "
                f"(activities of the partitions dropped would never be claimed again)")
        who = texts.one_line_text(actor, "actor", max_chars=200) if actor is not None \
            else _os_user()
        strays = {FIELD: None}  # absent or null, as doctor counts them (partition_1__id_1)
        if not write:
            pending = self._ctx.activities.count_documents(strays) if count > 1 else 0
            return PartitionChange(before, count, pending, written=False)
        if count > max(before, 1):
            self._ctx.control.replace_one(
                {"_id": PARTITIONS_ID},
                {"_id": PARTITIONS_ID, "count": count, "at": self._ctx.clock(), "actor": who},
                upsert=True)
            self._ctx.partitions.forget()
        stamped = 0
        if count > 1:
            stamped = self._ctx.activities.update_many(
                strays, {"$set": {FIELD: 0}}).modified_count
        if stamped:
            log.info("partitions: stamped partition 0 on activities without one",
                     extra={"fields": {"stamped": stamped, "partitions": count}})
        return PartitionChange(before, count, stamped, written=True)

    def require_queue(self, *, create: bool = False) -> None:
        """Return if this queue exists (or `create`); else NotFound naming the closest
        queue (discovery.py: operator writes to a misspelt queue are refused)."""
        from runnerq_cli.backend.store.discovery import require_queue

        require_queue(self._ctx.db, self._ctx.settings.queue, create=create)

    def missing_collections(self) -> list[str]:
        """The queue's collections that do not exist yet."""
        existing = set(self._ctx.db.list_collection_names())
        return [name for name in self._ctx.names.all().values() if name not in existing]

    def repair_outboxes(self, grace_seconds: float = TIMING.repair_grace) -> int:
        """Copy out outboxes a crashed process left behind (see writes.py): those older
        than the grace, by when no live writer is about to copy them itself, a page of
        REPAIR_PAGE a run. One that cannot be copied (another program's, malformed:
        shapes.outbox_problem) is skipped and logged, and never stops the others."""
        older_than = self._ctx.clock() - timedelta(seconds=grace_seconds)
        stale = []
        for doc in self._ctx.activities.find(queries.stale_outboxes(older_than).filter).limit(
                REPAIR_PAGE):
            problem = outbox_problem(doc)  # another program's, malformed: skipped, logged
            if problem is None:
                stale.append(doc)
            else:
                log.warning("outbox repair: skipped a malformed outbox", extra={"fields": {
                    "activity_id": str(doc["_id"]), "problem": problem}})
        if stale:
            self._ctx.outbox.flush(stale)
        repaired = len(stale)
        if repaired:
            log.info("outbox repair: copied out outboxes a writer left behind",
                     extra={"fields": {"repaired": repaired}})
        return repaired

    def retention_queries(self) -> dict[str, dict[str, Any]]:
        """{"completed"|"failed": query of the terminal activities past their retention}.

        A retention of 0 keeps them forever (no query). Pending, scheduled and
        running work never ages out.
        """
        plans = queries.retention(self._ctx.settings, self._ctx.clock())
        return {name: query.filter for name, query in plans.items()}

    def purge_expired(self, limit: int = 1000,
                      kinds: tuple[str, ...] = ("completed", "failed")) -> dict[str, int]:
        """Retention, by tree (tree_retention.py; docs/design.md, "Tree retention"): roots
        past their retention go with their whole tree once nothing in it is live and no
        live tree elsewhere waits on it; a plain activity is a tree of one. Returns the
        roots deleted per group."""
        trees = TreeRetention(self._ctx)
        counts = {"completed": 0, "failed": 0}
        for name, query in self.retention_queries().items():
            if name in kinds:
                counts[name] = trees.purge(query, limit)
        if any(counts.values()):
            log.info("retention purge: deleted activities past their retention",
                     extra={"fields": counts})
        return counts

    def cleanup(self, completed_s: float, failed_s: float, batch: int,
                events_s: float = 0) -> int:
        """RunnerQ's `CleanupExpired` with its own windows (the conformance driver, tools):
        trees past `completed_s` / `failed_s` (0: kept), oldest first, at most `batch`;
        `events_s` (0: off) trims finished activities' older events. Roots deleted."""
        trees = TreeRetention(self._ctx)
        now = self._ctx.clock()
        deleted = 0
        for name, statuses, keep in (("completed", (Status.COMPLETED,), completed_s),
                                     ("failed", UNSUCCESSFUL_STATUSES, failed_s)):
            if keep > 0 and deleted < batch:
                roots = queries.retention_of(name, statuses, now - timedelta(seconds=keep))
                deleted += trees.purge(roots.filter, batch - deleted)
        if events_s > 0:
            trees.trim_events(now - timedelta(seconds=events_s))
        return deleted

    @functools.cached_property
    def durable(self) -> Durable:
        """The durable operations wake repair needs (its place in the waiting set is kept
        between runs)."""
        return Durable(self._ctx, ActivityQueue(self._ctx))

    def repair_wakes(self) -> int:
        """Wake repair (docs/design.md, "Waking"): a page of the parked activities whose
        result is there, and spawns a crash left unconfirmed; run with the outbox repair."""
        return self.durable.repair_wakes()

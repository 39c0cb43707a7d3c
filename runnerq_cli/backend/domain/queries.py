"""Every filter and sort the backend sends on a hot or growing path, named, in one place.

The code that runs a query builds it here (queue.py claims, maintenance.py's
chores, writes.py's repair, inspection.py's lists, metrics.py's counts and
window, events.py's tail sources, workers.py), and
`doctor` explains the same objects (`representative_queries`): a query cannot
drift from the index check that vouches for it. tests/test_queries.py runs each
code path and asserts it sent exactly the query doctor checks.

Each query names the index meant to serve it by its purpose (indexes.py:
`IndexSpec.why`); `index_name(settings, purpose)` turns that into the name.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain import waits
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.index_specs import EVER, index_name
from runnerq_cli.backend.domain.models import (
    SPAWN_FENCE,
    UNSUCCESSFUL_STATUSES,
    Priority,
    Status,
    display_status,
)
from runnerq_cli.backend.domain.partitions import term as partition_term
from runnerq_cli.backend.domain.pause import PAUSE_ID
from runnerq_cli.backend.domain.timing import TIMING

if TYPE_CHECKING:
    from runnerq_cli.config import Settings

Sort = tuple[tuple[str, int], ...]

CLAIM_ORDER: Sort = (("priority", -1), ("created_at", 1))
# status -> (sort fields with direction, field `--since` applies to): keyset pagination
# (pagination.py); `_id` last breaks ties.
LIST_ORDERS: dict[Status, tuple[Sort, str]] = {
    Status.PENDING: ((("priority", -1), ("created_at", 1), ("_id", 1)), "created_at"),
    Status.SCHEDULED: ((("scheduled_at", 1), ("_id", 1)), "created_at"),
    Status.PROCESSING: ((("lease_deadline", 1), ("_id", 1)), "started_at"),
    # by wake time (scheduled_at_1__id_1_waiting); --since: when it was created
    Status.WAITING: ((("scheduled_at", 1), ("_id", 1)), "created_at"),
    Status.COMPLETED: ((("completed_at", -1), ("_id", -1)), "completed_at"),
    Status.FAILED: ((("completed_at", -1), ("_id", -1)), "completed_at"),
    Status.DEAD_LETTER: ((("completed_at", -1), ("_id", -1)), "completed_at"),
    Status.CANCELLED: ((("completed_at", -1), ("_id", -1)), "completed_at"),
}
# Which index serves a status's list (finished statuses: "list finished").
_LIST_INDEX = {Status.PENDING: "claim order", Status.SCHEDULED: "due scheduled",
               Status.PROCESSING: "expired leases", Status.WAITING: "waits that come due"}


@dataclass(frozen=True)
class Query:
    """A query the code runs: on which collection, what it matches, in which order."""

    name: str
    role: str  # collection role: activities, events, dead_letter, workers, ...
    filter: dict[str, Any]
    sort: Sort = ()
    purpose: str | None = None  # the index meant to serve it (IndexSpec.why's start)
    pipeline: tuple[dict[str, Any], ...] | None = None  # an aggregation instead of a find
    hinted: bool = False  # the code runs it with a hint naming that index
    # An in-memory sort is harmless where the matching set is bounded by something
    # other than the queue's size (running activities: by the workers' concurrency).
    sort_in_memory_ok: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sort_list(self) -> list[tuple[str, int]]:
        """The sort as pymongo takes it."""
        return list(self.sort)

    @property
    def match_stage(self) -> dict[str, Any]:
        """The filter as an aggregation's first stage."""
        return {"$match": self.filter}

    @property
    def sort_stage(self) -> dict[str, Any]:
        """The sort as an aggregation stage."""
        return {"$sort": dict(self.sort)}

    def index(self, settings: Settings) -> str | None:
        """The name of the index meant to serve it."""
        return index_name(settings, self.purpose) if self.purpose else None


# ---------------------------------------------------------------- the queue


def claim(types: Iterable[str] | None = None,
          exclude_types: Iterable[str] | None = None,
          present: Iterable[str] = (), *,
          partition: int | None = None) -> Query:
    """The next pending activity in claim order (of `types`, or not of `exclude_types`;
    of one `partition` in a partitioned queue, docs/design.md "Partitions").

    Around paused types the claim names the types it may take, `present` (the pending
    types `pending_types_beyond` found) less the excluded: `$in` on the index led by the
    type, whose per-type ranges the server merges in claim order, reading one key per
    type whatever the paused backlog (a `$nin` on the claim-order index read every
    paused entry ahead of the first claimable one). docs/design.md, "Claim order".
    """
    query: dict[str, Any] = {"status": Status.PENDING.value}
    query.update(partition_term(partition))  # the claim targets one partition (one shard)
    type_list = list(types or ())
    if type_list:
        query["activity_type"] = {"$in": type_list}
        return Query("claim by type", "activities", query, CLAIM_ORDER, "claims limited")
    if exclude_types:
        excluded = set(exclude_types)
        query["activity_type"] = {"$in": sorted(set(present) - excluded)}
        return Query("claim around paused types", "activities", query, CLAIM_ORDER,
                     "claims limited")
    return Query("claim", "activities", query, CLAIM_ORDER, "claim order")


def claimable_anywhere(count: int, types: Iterable[str] | None = None,
                       exclude_types: Iterable[str] | None = None,
                       present: Iterable[str] = ()) -> Query:
    """Whether any of `count` partitions has a claimable activity: the claim's filter
    with `partition: {$in: [0, ..., count-1]}` for its partition term, one document, no
    sort. An idle worker of a partitioned queue asks it before claiming again (one
    command, one seek per partition on each shard) instead of one empty claim per
    partition (docs/design.md, "How a worker spreads over partitions"). The `$in` is
    the union of the claims' own terms, so a stray that no claim takes (no partition,
    or one outside the count) never makes an idle worker claim again."""
    base = partition_claim(0, types, exclude_types, present)
    # No sort (the claims' is theirs): doctor explains this query as sent, and a sorted
    # $in over every partition is merged from at most 200 index points by MongoDB.
    return replace(base, name="any claimable (an idle partitioned claimer)",
                   filter={**base.filter, "partition": {"$in": list(range(count))}}, sort=())


def pending_types_beyond(known: Iterable[str], odd: Iterable[Any] = ()) -> Query:
    """The first pending activity type not in `known` (the types found so far and the
    paused ones), read from index keys alone: `$nin` on the index led by the type gives
    the ranges between the known types, so each known type costs one seek, not its
    backlog. A claim around paused types asks it until it finds none. `odd`: values
    found that are no string (a malformed activity's: null, a number), stepped over
    too, or the look would stop at the first of them (they sort before every string)."""
    return Query("pending types (claim around paused types)", "activities",
                 {"status": Status.PENDING.value,
                  "activity_type": {"$nin": [*sorted(set(known)), *odd]}},
                 (("activity_type", 1),), "claims limited")


def partition_claim(partition: int, types: Iterable[str] | None = None,
                    exclude_types: Iterable[str] | None = None,
                    present: Iterable[str] = ()) -> Query:
    """`claim` of one partition, naming the partition's own claim index (the one that
    makes an empty partition cheap to skip): what doctor explains for a partitioned
    queue."""
    plain = claim(types, exclude_types, present, partition=partition)
    purpose = "partition claims limited" if plain.purpose == "claims limited" else \
        "partition claim order"
    return replace(plain, name=f"{plain.name}, one partition", purpose=purpose)


def next_key(activity_type: str, after: str | None, skip: Iterable[str] = ()) -> Query:
    """The first key of `activity_type` after `after` (None: from the first) that has
    pending work and is not in `skip` (keys at their own limits): the rotation of a
    limited claim (docs/design.md, "A limited claim", step 1), one seek on the keyed
    index, only the key returned."""
    key: dict[str, Any] = {"$type": "string"}
    if after is not None:
        key["$gt"] = after
    if skip:
        key["$nin"] = sorted(set(skip))
    return Query("flow: next key", "activities",
                 {"status": Status.PENDING.value, "activity_type": activity_type,
                  "flow_key": key}, (("activity_type", 1), ("flow_key", 1)), "keyed claims")


def keyed_claim(activity_type: str, key: str) -> Query:
    """A limited claim of one key's work in claim order ("" : the type's activities
    without a key, on the type's claim index)."""
    if key:
        return Query("flow: claim of a key", "activities",
                     {"status": Status.PENDING.value, "activity_type": activity_type,
                      "flow_key": key}, CLAIM_ORDER, "keyed claims")
    return Query("flow: claim without a key", "activities",
                 {"status": Status.PENDING.value, "activity_type": activity_type,
                  "flow_key": None}, CLAIM_ORDER, "claims limited")


def running_leases(lease_ids: Iterable[str]) -> Query:
    """Which of these leases still run (a limited claimer's repair of stale holders):
    read on the running activities' index, a set bounded by the workers' concurrency."""
    return Query("flow: leases still running", "activities",
                 {"status": Status.PROCESSING.value, "lease_id": {"$in": sorted(lease_ids)}},
                 purpose="expired leases", hinted=True)


def due_scheduled(now: datetime) -> Query:
    """Scheduled activities whose time has come (the scheduler makes them pending)."""
    return Query("scheduler", "activities",
                 {"status": Status.SCHEDULED.value, "scheduled_at": {"$lte": now}},
                 purpose="due scheduled")


def due_waits_query(now: datetime) -> Query:
    """Parked activities whose wait has come to its time (the scheduler wakes them)."""
    return Query("scheduler: waits", "activities", waits.due_waits(now),
                 purpose="waits that come due")


def waiters_of(result_ids: Iterable[Any]) -> Query:
    """Parked activities waiting on one of `result_ids` (every publication wakes them)."""
    return Query("wake", "activities", waits.waiting_on(result_ids), purpose="waking by result")


def expired_leases(now: datetime) -> Query:
    """Running activities past their lease (the reaper requeues or dead-letters them)."""
    return Query("reaper", "activities",
                 {"status": Status.PROCESSING.value, "lease_deadline": {"$lt": now}},
                 purpose="expired leases")


def live_leases(now: datetime) -> Query:
    """Running activities whose lease has not expired (doctor's `timeouts` compares each
    one's run with its `timeout_seconds`). The running set is small (workers'
    concurrency)."""
    return Query("doctor, live leases", "activities",
                 {"status": Status.PROCESSING.value, "lease_deadline": {"$gte": now}},
                 purpose="expired leases")


def unexpirable_leases() -> Query:
    """Running activities whose `lease_deadline` is not a date, or absent: no deadline
    ever passes, so the reaper sets them aside as malformed (docs/design.md, "Malformed
    documents"). The running set is small (workers' concurrency)."""
    return Query("reaper, malformed leases", "activities",
                 {"status": Status.PROCESSING.value,
                  "lease_deadline": {"$not": {"$type": "date"}}},
                 purpose="expired leases")


def stale_outboxes(older_than: datetime) -> Query:
    """Outboxes a crashed writer left (the repair copies them out)."""
    return Query("outbox repair", "activities", {"outbox.since": {"$lt": older_than}},
                 purpose="repair of outboxes")


def retention(settings: Settings, now: datetime) -> dict[str, Query]:
    """{"completed"|"failed": roots of terminal trees past their retention}; a retention
    of 0 keeps them forever (no query)."""
    plans = (("completed", [Status.COMPLETED], settings.retention_completed),
             ("failed", list(UNSUCCESSFUL_STATUSES), settings.retention_failed))
    return {name: retention_of(name, statuses, now - timedelta(seconds=keep))
            for name, statuses, keep in plans if keep > 0}


def retention_of(name: str, statuses: Iterable[Status], cutoff: datetime) -> Query:
    """Roots (no parent: a child goes with its tree, docs/design.md "Tree retention") in
    `statuses` finished before `cutoff`, oldest first."""
    return Query(f"retention {name}", "activities",
                 {"status": {"$in": [s.value for s in statuses]},
                  "completed_at": {"$lt": cutoff}, "parent_activity_id": {"$exists": False}},
                 (("completed_at", 1), ("_id", 1)), purpose="list finished")


# ---------------------------------------------------------------- the views


def status_query(status: Status) -> dict[str, Any]:
    """Activities in `status`, in the form its partial index answers (indexes.py)."""
    query: dict[str, Any] = {"status": status.value}
    if status.is_terminal:
        query["completed_at"] = {"$gte": EVER}
    return query


def list_page(status: Status) -> Query:
    """A page of activities in `status`, in the status's natural order (pagination.py
    adds the filters and the keyset clause to `filter`)."""
    return Query(f"list {display_status(status.value)}", "activities", status_query(status),
                 LIST_ORDERS[status][0], _LIST_INDEX.get(status, "list finished"))


def dead_letter_list() -> Query:
    """Dead-letter records, newest first."""
    return Query("dead-letter list", "dead_letter", {}, (("failed_at", -1),),
                 "dead-letter listing")


def events_of(activity_id: Any) -> Query:
    """The stored events of one activity, newest first."""
    return Query("events of an activity", "events", {"activity_id": activity_id},
                 (("timestamp", -1),), "events of an activity")


def oldest_pending() -> Query:
    """The longest-waiting pending activity: one seek per priority (the ranges merged)."""
    return Query("stats oldest pending", "activities",
                 {"status": Status.PENDING.value, "priority": {"$in": [int(p) for p in Priority]},
                  "created_at": {"$type": "date"}},  # a stray document's text sorts first
                 (("created_at", 1),), "claim order")


def live_workers(now: datetime, stale_after: float) -> Query:
    """Workers whose heartbeat is fresh."""
    return Query("live workers", "workers",
                 {"last_heartbeat": {"$gte": now - timedelta(seconds=stale_after)}},
                 purpose="stale worker")


def due_schedules(now: datetime) -> Query:
    """Schedules whose next fire is due, or that hold back a fire (`overlap: buffer_one`):
    the firing chore (design.md, "Firing"). Each branch has its index; the sparse one of
    buffered fires holds only those, so its branch is one seek when there is none. The
    `$gte` keeps out a null `next_fire_at`, which some servers match with `$lte`."""
    return Query("due schedules", "schedules",
                 {"$or": [{"next_fire_at": {"$gte": EVER, "$lte": now}, "paused": False},
                          {"buffered.at": {"$gte": EVER}, "paused": False}]},
                 (("next_fire_at", 1),), "due schedules")


# Finished states counted exactly (the rest of finished history, completed, is estimated
# from the collection's metadata count: metrics.py).
EXACT_FINISHED = tuple(s.value for s in UNSUCCESSFUL_STATUSES)


def status_counts() -> list[Query]:
    """Aggregations that give every EXACT count by status and priority, each covered by
    one index (hinted) and reading only its state's keys: the live states on their own
    partial indexes, each rare finished state on the finished index's status prefix."""
    parts: list[tuple[str, dict[str, Any], str]] = [
             (Status.PENDING.value, {"status": Status.PENDING.value}, "claim order"),
             (Status.SCHEDULED.value, {"status": Status.SCHEDULED.value}, "due scheduled"),
             (Status.PROCESSING.value, {"status": Status.PROCESSING.value}, "expired leases"),
             (Status.WAITING.value, {"status": Status.WAITING.value}, "waits that come due"),
             *((status, {"status": status, "completed_at": {"$gte": EVER}}, "list finished")
               for status in EXACT_FINISHED)]
    return [Query(f"stats counts ({label})", "activities", match, purpose=purpose, hinted=True,
                  pipeline=({"$match": match},
                            {"$group": {"_id": {"status": "$status", "priority": "$priority",
                                                "priority_type": {"$type": "$priority"}},
                                        "count": {"$sum": 1}}}))
            for label, match, purpose in parts]


def doctor_waits() -> tuple[Query, Query]:
    """doctor's reads of durable waits (diagnosis/wait_checks.py), each hinted to a
    partial waiting index: the waits on a result, and the waits with neither a wake time
    nor a result (a spawn not confirmed yet left to wake repair)."""
    waiting = Status.WAITING.value
    on_result = Query("doctor waits on a result", "activities",
                      {"status": waiting, "waiting_result_id": {"$type": "binData"}},
                      purpose="waking by result", hinted=True)
    nothing = Query("doctor waits with no wake time", "activities",
                    {"status": waiting, "scheduled_at": {"$exists": False},
                     "waiting_result_id": {"$exists": False},
                     SPAWN_FENCE: {"$exists": False}},
                    purpose="waits that come due", hinted=True)
    return on_result, nothing


def type_presence(activity_type: str) -> list[Query]:
    """Whether the queue knows `activity_type` (control.seen_type), cheapest first: its
    pauses in the audit trail, then its pending, running, scheduled and finished index
    keys; each hinted (covered: no document read) and stopped at the first match."""
    of_type = {"activity_type": activity_type}
    finished = [s.value for s in Status if s.is_terminal]
    looks: list[tuple[str, dict[str, Any], str]] = [
        ("events", {"activity_id": None, "event_type": EventType.PAUSED.value,
                    "detail.types": activity_type},
         "events of an activity"),
        ("activities", {"status": Status.PENDING.value, **of_type}, "claims limited"),
        ("activities", {"status": Status.PROCESSING.value, **of_type}, "expired leases"),
        ("activities", {"status": Status.SCHEDULED.value, **of_type}, "due scheduled"),
        ("activities", {"status": {"$in": finished}, "completed_at": {"$gte": EVER}, **of_type},
         "list finished"),
    ]
    return [Query(f"type seen ({purpose})", role, match, purpose=purpose, hinted=True)
            for role, match, purpose in looks]


# ------------------------------------------------------------- change streams

# Change events projected down to what a wake-up needs: the resume token (`_id`, always
# kept) and the kind. The activity an insert carries never travels (store/changes.py).
WAKE_PROJECTION = {"$project": {"operationType": 1}}


def claimable_changes(types: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The change-stream pipeline of writes that may make work claimable for `types`
    (() for every type): a pending insert, an update that sets `status: "pending"`
    (a retry, a release, the scheduler, the reaper, an operator's action). docs/design.md,
    "Idle workers and change streams".

    Conjunctive field conditions only (no `$or`), each true where its part of the event
    is absent (`$in` with null matches a missing field): an insert has no
    `updateDescription`, an update no `fullDocument`. Claims and acknowledgements set
    another status and are left out on the server; lease renewals (they set
    `lease_deadline`) too. An update that leaves `status` alone (an outbox copy) passes:
    a wake that finds nothing costs one empty claim.
    """
    match: dict[str, Any] = {
        "operationType": {"$in": ["insert", "update", "replace"]},
        "fullDocument.status": {"$in": [Status.PENDING.value, None]},
        "updateDescription.updatedFields.status": {"$in": [Status.PENDING.value, None]},
        "updateDescription.updatedFields.lease_deadline": {"$exists": False},
    }
    type_list = sorted(set(types))
    if type_list:
        match["fullDocument.activity_type"] = {"$in": [*type_list, None]}
    return [{"$match": match}, WAKE_PROJECTION]


def limit_changes() -> list[dict[str, Any]]:
    """The change-stream pipeline on the limit documents of a waiting claimer: every
    write but a take (a take sets `taken_at`), so a slot freed (a release, the reaper's,
    a give-back, the stale-holder repair) and a limit set, created or removed wake it,
    and the takes of a busy fleet do not (docs/design.md, "Waiting for a slot").
    Conjunctive, true where the event has no `updateDescription` (an insert, a delete)."""
    return [{"$match": {
        "operationType": {"$in": ["insert", "update", "replace", "delete"]},
        "updateDescription.updatedFields.taken_at": {"$exists": False},
    }}, WAKE_PROJECTION]


def pause_changes() -> list[dict[str, Any]]:
    """The change-stream pipeline on the control collection of an idle worker: every
    write to the pause document (a pause, a resume: docs/design.md, "Control"), which
    changes no activity and so wakes nothing on the activities' stream."""
    return [{"$match": {"documentKey._id": PAUSE_ID}}, WAKE_PROJECTION]


def tail_changes() -> list[dict[str, Any]]:
    """The tail's change-stream pipeline: any write to an activity (every lifecycle step
    changes its document), projected down to a wake-up."""
    return [{"$match": {"operationType": {"$in": ["insert", "update", "replace"]}}},
            WAKE_PROJECTION]


def tail_record_changes() -> list[dict[str, Any]]:
    """The tail's second wake-up, on the events collection: the queue's own records
    (pauses, resumes, operator actions: `activity_id` null), which change no activity
    document and so wake nothing on the activities' stream."""
    return [{"$match": {"operationType": "insert", "fullDocument.activity_id": None}},
            WAKE_PROJECTION]


# ----------------------------------------------------------- windows and tails

# Finished in the sense of the stats window: completed, failed or dead-lettered (a
# cancellation is an operator's act, not an outcome of work).
TERMINAL_DONE = (Status.COMPLETED.value, Status.FAILED.value, Status.DEAD_LETTER.value)


def finished_since(since: datetime) -> Query:
    """Activities that finished at or after `since`, newest first: the window behind
    stats' throughput, latency and history and the metrics' outcomes (metrics.py puts
    `match_stage` and `sort_stage` at the head of its pipelines)."""
    return Query("stats window", "activities",
                 {"status": {"$in": list(TERMINAL_DONE)}, "completed_at": {"$gte": since}},
                 (("completed_at", -1),), "list finished")


def completions_since(since: datetime) -> Query:
    """Completed activities of the stats window (stats' history counts them by type and
    bucket: index keys only, hinted)."""
    window = finished_since(since)
    done = {"status": Status.COMPLETED.value}
    return Query("stats history (completed)", "activities", {**window.filter, **done},
                 purpose=window.purpose, hinted=True,
                 pipeline=(window.match_stage, {"$match": done}))


# What failed, by type and error (failures.py): one stored event per failed attempt
# (design.md, "One event per finished attempt"), kept through retries (a retry clears
# the activity's `last_error`, never its events) until the events TTL.
FAILURE_EVENTS = ("Retrying", "Failed", "DeadLetter")


def failure_events_since(since: datetime) -> Query:
    """Stored events of failed attempts (and expired leases) from `since`, oldest first.
    O(events stored in the window): a success stores no event (derived.py)."""
    return Query("failure events", "events", {"timestamp": {"$gte": since}, "$or": [
        {"event_type": {"$in": list(FAILURE_EVENTS)}},
        {"event_type": "Requeued", "detail.reason": "lease_expired"}]},
        (("timestamp", 1),), "events TTL")


def failures_since(since: datetime) -> Query:
    """failure_events_since grouped by activity type and error (failures.py): count, per
    kind, first and last seen, the newest one's activity; most attempts first."""
    events = failure_events_since(since)
    kind = {name: {"$sum": {"$cond": [{"$eq": ["$event_type", event]}, 1, 0]}}
            for name, event in (("retrying", "Retrying"), ("failed", "Failed"),
                                ("dead_letter", "DeadLetter"), ("lease_expired", "Requeued"))}
    return Query("failures by type and error", "events", events.filter, events.sort,
                 events.purpose, pipeline=(
                     events.match_stage, events.sort_stage,
                     {"$group": {"_id": {"type": "$activity_type",
                                         "error": {"$ifNull": ["$detail.error", ""]}},
                                 "count": {"$sum": 1}, **kind,
                                 "first_seen": {"$min": "$timestamp"},
                                 "last_seen": {"$max": "$timestamp"},
                                 "example_id": {"$last": "$activity_id"}}},
                     {"$sort": {"count": -1, "last_seen": -1}}))


# Completed activities are counted key by key up to this many (stats, metrics, doctor's
# summary); past it their count is the collection's metadata count minus the exact ones.
EXACT_COMPLETED_UP_TO = 10_000


def completed_counts(limit: int) -> Query:
    """Completed activities by priority, reading at most `limit` index keys (covered,
    hinted): exact while fewer are kept, else metrics.py estimates (EXACT_COMPLETED_UP_TO)."""
    match = {"status": Status.COMPLETED.value, "completed_at": {"$gte": EVER}}
    return Query("stats counts (completed, bounded)", "activities", match,
                 purpose="list finished", hinted=True,
                 pipeline=({"$match": match}, {"$limit": limit},
                           {"$group": {"_id": {"status": "$status", "priority": "$priority",
                                               "priority_type": {"$type": "$priority"}},
                                       "count": {"$sum": 1}}}))


def first_created() -> Query:
    """The queue's first activity kept (one seek on created_at_1): stats' throughput is
    over the time its window really covers, not before the queue had work."""
    return Query("stats window start", "activities", {"created_at": {"$gte": EVER}},
                 (("created_at", 1),), "derived Enqueued")


# The tail's derived sources (events.py): which step time of an activity document
# gives which events, the extra match, and the index that serves the range.
TAIL_STEPS: tuple[tuple[str, str, dict[str, Any], frozenset[str], str], ...] = (
    ("enqueued", "created_at", {}, frozenset({"Enqueued", "Scheduled"}), "derived Enqueued"),
    ("started", "started_at", {}, frozenset({"Dequeued", "Started"}), "derived Dequeued"),
    ("completed", "completed_at", {"status": Status.COMPLETED.value},
     frozenset({"Completed", "ResultStored"}), "list finished"),
)


def tail_step(label: str, field: str, extra: dict[str, Any], purpose: str,
              start: datetime, base: dict[str, Any] | None = None) -> Query:
    """Activities whose step `field` falls at or after `start` (one TAIL_STEPS source;
    `base` holds the tail's activity filters), in that step's order."""
    return Query(f"tail: {label}", "activities", {**(base or {}), **extra, field: {"$gte": start}},
                 ((field, 1),), purpose)


def tail_steps(start: datetime, base: dict[str, Any] | None = None) -> list[Query]:
    """Every derived source of the tail from `start`."""
    return [tail_step(label, field, extra, purpose, start, base)
            for label, field, extra, _kinds, purpose in TAIL_STEPS]


def uncopied_steps(base: dict[str, Any] | None = None) -> Query:
    """Activities whose outbox still holds steps of an ended attempt (the tail shows
    them where they are until the copier has moved them)."""
    return Query("tail: steps not copied out yet", "activities",
                 {**(base or {}), "outbox.since": {"$exists": True}},
                 purpose="repair of outboxes")


def stored_events_since(start: datetime, match: dict[str, Any] | None = None,
                        floor: datetime | None = None) -> Query:
    """Stored events positioned at or after `start` (the server's `ingested_at`), in
    position order; `match` holds the tail's filters, `floor` its --since."""
    query: dict[str, Any] = {**(match or {}), "ingested_at": {"$gte": start}}
    if floor is not None:
        query["timestamp"] = {"$gte": floor}
    return Query("event stream polling", "events", query, (("ingested_at", 1), ("_id", 1)),
                 "event stream polling")


def stored_events_of(activity_ids: Iterable[Any]) -> Query:
    """The stored events of the activities a tail read derived steps from."""
    return Query("tail: stored events of derived activities", "events",
                 {"activity_id": {"$in": list(activity_ids)}}, purpose="events of an activity")


# ----------------------------------------------------- what doctor explains

# Sample arguments doctor explains the parameterised queries with.
SAMPLE_TYPES = ("a", "b")
SAMPLE_PAUSED = ("a",)
SAMPLE_ACTIVITY = uuid.UUID(int=0)
STATS_WINDOW_SAMPLE = 900.0  # stats' default latency window
TAIL_BEHIND_SAMPLE = 10.0  # a tail reading from 10 s behind the server's clock
FAILURES_SAMPLE = 3600.0  # doctor's dead-letter check: what failed in the last hour


def representative_queries(settings: Settings, now: datetime,
                           repair_grace: float = TIMING.repair_grace, *,
                           partitions: int = 1) -> list[Query]:
    """The claim, scheduler, reaper, repair, retention, list, stats, tail and worker
    queries, as the code builds them (with sample arguments): doctor's plan check; with
    `partitions` above 1, the claims of one partition too."""
    queries = [
        claim(),
        claim(types=SAMPLE_TYPES),
        claim(exclude_types=SAMPLE_PAUSED, present=SAMPLE_TYPES),
        pending_types_beyond(SAMPLE_TYPES),
        due_scheduled(now),
        due_waits_query(now),
        waiters_of([SAMPLE_ACTIVITY]),
        expired_leases(now),
        live_leases(now),
        unexpirable_leases(),
        stale_outboxes(now - timedelta(seconds=repair_grace)),
        *retention(settings, now).values(),
        *(list_page(status) for status in LIST_ORDERS),
        *status_counts(),
        oldest_pending(),
        events_of(SAMPLE_ACTIVITY),
        dead_letter_list(),
        live_workers(now, TIMING.worker_stale_after),
        due_schedules(now),
        finished_since(now - timedelta(seconds=STATS_WINDOW_SAMPLE)),
        *tail_steps(now - timedelta(seconds=TAIL_BEHIND_SAMPLE)),
        uncopied_steps(),
        stored_events_since(now - timedelta(seconds=TAIL_BEHIND_SAMPLE)),
        failures_since(now - timedelta(seconds=FAILURES_SAMPLE)),
        completed_counts(EXACT_COMPLETED_UP_TO + 1),
        first_created(),
        next_key(SAMPLE_TYPES[0], None),
        keyed_claim(SAMPLE_TYPES[0], "k"),
        running_leases(["0" * 32]),
    ]
    if partitions > 1:
        queries += [partition_claim(0), partition_claim(0, types=SAMPLE_TYPES),
                    partition_claim(0, exclude_types=SAMPLE_PAUSED),
                    claimable_anywhere(partitions),
                    claimable_anywhere(partitions, types=SAMPLE_TYPES)]
    return queries

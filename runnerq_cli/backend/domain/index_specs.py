"""The indexes a queue uses, as data: what each holds and which queries it serves.

Pure (no server): the named queries (queries.py) name the index they expect and
the diagnosis compares plans, so the plan sits below the store that creates it
(indexes.py compares it with the server and creates what is missing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.config import Settings

# The oldest date MongoDB stores: `{completed_at: {$gte: EVER}}` says "has a completion
# time" in a form an index answers from its keys ($exists would need the document).
EVER = datetime(1, 1, 1, tzinfo=UTC)
PENDING = {"status": "pending"}
SCHEDULED = {"status": "scheduled"}
PROCESSING = {"status": "processing"}
WAITING = {"status": "waiting"}
KEYED = {"status": "pending", "flow_key": {"$type": "string"}}
FINISHED = {"completed_at": {"$exists": True}}


@dataclass(frozen=True)
class IndexSpec:
    collection: str  # role: activities, results, ...
    keys: tuple[tuple[str, int], ...]
    options: dict[str, Any] = field(default_factory=dict)
    why: str = ""
    label: str = ""  # appended to the key-derived name of a partial index

    @property
    def name(self) -> str:
        base = "_".join(f"{k}_{d}" for k, d in self.keys)
        return f"{base}_{self.label}" if self.label else base


def _partial(filter_: dict[str, Any]) -> dict[str, Any]:
    return {"partialFilterExpression": filter_}


def index_plan(settings: Settings, partitions: int = 1) -> list[IndexSpec]:
    """The indexes this version uses, each with the queries it serves (docs/design.md, "Indexes");
    a queue of more than one partition has three more (`partition_indexes`).

    Activity indexes are partial: each holds only the documents in one state,
    so a document's entry changes only when it enters or leaves that state,
    and an index stays as small as its state however much history the queue
    keeps. `status` trails the keys of the single-state indexes (it never
    changes within one), and `priority` and `activity_type` trail where they
    do not already lead: counts by status, priority and type then read index
    keys only, and an entry changes only when a rare operator action changes
    one of them.
    """
    def ttl(seconds: float) -> dict[str, Any]:
        return {"expireAfterSeconds": int(seconds)}

    return [
        IndexSpec("activities", (("priority", -1), ("created_at", 1), ("_id", 1), ("status", 1),),
                  _partial(PENDING), label="pending",
                  why="claim order; list pending pages; oldest pending; pending counts"),
        IndexSpec("activities", (("activity_type", 1), ("priority", -1), ("created_at", 1),
                                 ("status", 1)), _partial(PENDING), label="pending",
                  why="claims limited to activity types (also around paused types); "
                      "which types are pending; pending counts by type"),
        IndexSpec("activities", (("scheduled_at", 1), ("_id", 1), ("status", 1), ("priority", 1),
                                 ("activity_type", 1)), _partial(SCHEDULED), label="scheduled",
                  why="due scheduled work (scheduler); list scheduled pages; counts"),
        IndexSpec("activities", (("lease_deadline", 1), ("_id", 1), ("status", 1),
                                 ("priority", 1), ("activity_type", 1)), _partial(PROCESSING),
                  label="processing",
                  why="expired leases (reaper); list running pages; counts"),
        IndexSpec("activities", (("status", 1), ("completed_at", 1), ("_id", 1), ("priority", 1),
                                 ("activity_type", 1)), _partial(FINISHED), label="finished",
                  why="list finished pages; retention; throughput; derived Completed events"),
        IndexSpec("activities", (("created_at", 1),),
                  why="derived Enqueued/Scheduled events for tails"),
        IndexSpec("activities", (("started_at", 1),), {"sparse": True},
                  why="derived Dequeued/Started events for tails"),
        IndexSpec("activities", (("idempotency_key", 1),), {"sparse": True},
                  why="idempotency look-ups"),
        IndexSpec("activities", (("outbox.since", 1),), {"sparse": True},
                  why="repair of outboxes left by a crash"),
        IndexSpec("results", (("created_at", 1),), ttl(settings.results_ttl), why="results TTL"),
        IndexSpec("idempotency", (("created_at", 1),), ttl(settings.idempotency_ttl),
                  why="idempotency keys TTL"),
        IndexSpec("events", (("activity_id", 1), ("timestamp", -1)), why="events of an activity"),
        IndexSpec("events", (("timestamp", 1),), ttl(settings.events_ttl),
                  why="events TTL; failures by type and error"),
        IndexSpec("events", (("ingested_at", 1), ("_id", 1)), why="event stream polling"),
        IndexSpec("dead_letter", (("failed_at", -1),), why="dead-letter listing"),
        IndexSpec("workers", (("last_heartbeat", 1),), ttl(TIMING.registry_ttl),
                  why="stale worker entries expire"),
        IndexSpec("schedules", (("next_fire_at", 1), ("paused", 1)),
                  why="due schedules (the firing chore)"),
        # `buffered.at` alone: a compound sparse index holds every document with any of
        # its keys, and every schedule has `paused`.
        IndexSpec("schedules", (("buffered.at", 1),), {"sparse": True},
                  why="buffered fires (overlap buffer_one; the firing chore)"),
        *durable_indexes(),
        # Flow control (docs/design.md, "Flow control"): only keyed pending activities,
        # so a plain activity adds no entry.
        IndexSpec("activities", (("activity_type", 1), ("flow_key", 1), ("priority", -1),
                                 ("created_at", 1), ("status", 1)), _partial(KEYED),
                  label="keyed",
                  why="keyed claims (flow control): the next key, a key's claim, pending "
                      "by key"),
        *(partition_indexes() if partitions > 1 else ()),
    ]


def durable_indexes() -> list[IndexSpec]:
    """Durable activities' (docs/design.md, "Indexes of durable activities"): partial or
    sparse on fields a plain activity never has, so it adds no entry to any of them."""
    return [
        IndexSpec("activities", (("waiting_result_id", 1),), _partial(WAITING), label="waiting",
                  why="waking by result; wake repair"),
        IndexSpec("activities", (("scheduled_at", 1), ("_id", 1)), _partial(WAITING),
                  label="waiting", why="waits that come due (the scheduler); list waiting"),
        # Partial, not sparse: a compound sparse index holds every document with any of
        # its keys, and every activity has `created_at`.
        IndexSpec("activities", (("parent_activity_id", 1), ("created_at", 1)),
                  _partial({"parent_activity_id": {"$exists": True}}), label="child",
                  why="children of an activity"),
        IndexSpec("activities", (("root_activity_id", 1),), {"sparse": True},
                  why="trees; tree retention"),
        IndexSpec("checkpoints", (("owner_id", 1), ("created_at", 1)),
                  why="steps of an activity; deletes by owner"),
        IndexSpec("dependencies", (("waiter_id", 1), ("result_id", 1)), {"unique": True},
                  why="dependency upserts; what an activity waits on"),
        IndexSpec("dependencies", (("result_id", 1),), why="who waits on a result"),
        IndexSpec("dependencies", (("producer_id", 1),), {"sparse": True},
                  why="pinning of trees (retention)"),
    ]


def partition_indexes() -> list[IndexSpec]:
    """A partitioned queue's own (docs/design.md, "Indexes of a partitioned queue"): the
    shard key's index, and the claim indexes of one partition, led by `partition` so
    that a claim of an empty partition is one seek."""
    return [
        IndexSpec("activities", (("partition", 1), ("_id", 1)), why="the shard key"),
        IndexSpec("activities", (("partition", 1), ("priority", -1), ("created_at", 1),
                                 ("_id", 1), ("status", 1)), _partial(PENDING), label="pending",
                  why="partition claim order: the claim of one partition"),
        IndexSpec("activities", (("partition", 1), ("activity_type", 1), ("priority", -1),
                                 ("created_at", 1), ("status", 1)), _partial(PENDING),
                  label="pending",
                  why="partition claims limited to activity types"),
    ]


def index_name(settings: Settings, why_prefix: str) -> str:
    """The name of the planned index whose purpose starts with `why_prefix` (for hints;
    a partitioned queue's indexes among them)."""
    for spec in index_plan(settings, partitions=2):
        if spec.why.startswith(why_prefix):
            return spec.name
    raise KeyError(why_prefix)

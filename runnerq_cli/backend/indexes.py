"""The collections and indexes of a queue: plan, compare with the server, create.

Indexes get MongoDB's default names (e.g. `status_1_priority_-1_created_at_1`)
so that another program creating the same index meets ours, not a twin.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pymongo import IndexModel
from pymongo.errors import CollectionInvalid, OperationFailure

from runnerq_cli.backend.driver import Database
from runnerq_cli.backend.naming import CollectionNames
from runnerq_cli.backend.timing import TIMING
from runnerq_cli.config import Settings

_COMPARED_OPTIONS = ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression")
# Indexes earlier versions created that this one no longer uses (reported as obsolete).


class IndexState(StrEnum):
    CREATED = "created"
    PRESENT = "present"
    MISSING = "missing"  # --check / --dry-run: would be created
    CONFLICT = "conflict"  # same keys (or name), other options: never dropped silently
    OBSOLETE = "obsolete"  # on our collections, not used by this version: dropped on request
    DROPPED = "dropped"


# The oldest date MongoDB stores: `{completed_at: {$gte: EVER}}` says "has a completion
# time" in a form an index answers from its keys ($exists would need the document).
EVER = datetime(1, 1, 1, tzinfo=UTC)
PENDING = {"status": "pending"}
SCHEDULED = {"status": "scheduled"}
PROCESSING = {"status": "processing"}
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


@dataclass(frozen=True)
class IndexReport:
    spec: IndexSpec
    collection_name: str
    state: IndexState
    difference: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"collection": self.collection_name, "name": self.spec.name,
                "keys": dict(self.spec.keys), "options": self.spec.options,
                "state": self.state.value, "difference": self.difference or None,
                "why": self.spec.why}


def _partial(filter_: dict[str, Any]) -> dict[str, Any]:
    return {"partialFilterExpression": filter_}


def index_plan(settings: Settings) -> list[IndexSpec]:
    """The indexes this version uses, each with the queries it serves (docs/design.md, "Indexes").

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
                  why="claims limited to activity types; pending counts by type"),
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
    ]


def index_name(settings: Settings, why_prefix: str) -> str:
    """The name of the planned index whose purpose starts with `why_prefix` (for hints)."""
    for spec in index_plan(settings):
        if spec.why.startswith(why_prefix):
            return spec.name
    raise KeyError(why_prefix)


def _differences(spec: IndexSpec, existing: dict[str, Any]) -> str:
    diffs = []
    for option in _COMPARED_OPTIONS:
        want, have = spec.options.get(option), existing.get(option)
        if option == "sparse":
            want, have = bool(want), bool(have)
        if option == "unique":
            want, have = bool(want), bool(have)
        if want != have:
            diffs.append(f"{option}: want {want}, have {have}")
    return "; ".join(diffs)


def ensure_indexes(db: Database, settings: Settings, *, write: bool = True,
                   drop_obsolete: bool = False) -> list[IndexReport]:
    """Create what is missing (when `write`), and report every index's state.

    Indexes on the queue's collections that this version does not plan are
    reported as obsolete; they are dropped only with `drop_obsolete` (never
    by themselves: another program may use one).
    """
    names = CollectionNames(settings.queue).all()
    if write:
        existing_collections = set(db.list_collection_names())
        for collection_name in names.values():
            if collection_name not in existing_collections:
                with suppress(CollectionInvalid, OperationFailure):  # created meanwhile
                    db.create_collection(collection_name)
    current: dict[str, list[dict[str, Any]]] = {}
    reports = []
    missing: dict[str, list[IndexSpec]] = {}  # collection -> indexes to create, in one command
    plan = index_plan(settings)
    for spec in plan:
        collection_name = names[spec.collection]
        if collection_name not in current:
            current[collection_name] = list(db[collection_name].list_indexes())
        same_keys = [ix for ix in current[collection_name]
                     if tuple((k, int(v)) for k, v in ix["key"].items()) == spec.keys]
        same_name = [ix for ix in current[collection_name] if ix["name"] == spec.name]
        state, difference = IndexState.MISSING, ""
        if same_keys:
            difference = _differences(spec, same_keys[0])
            state = IndexState.CONFLICT if difference else IndexState.PRESENT
        elif same_name:
            state = IndexState.CONFLICT
            difference = f"name {spec.name} is used by keys {dict(same_name[0]['key'])}"
        elif write:
            missing.setdefault(collection_name, []).append(spec)
            state = IndexState.CREATED
        reports.append(IndexReport(spec, collection_name, state, difference))
    for collection_name, specs in missing.items():
        db[collection_name].create_indexes([
            IndexModel(list(spec.keys), name=spec.name, **spec.options) for spec in specs])
    reports += _obsolete(db, plan, names, current, drop=drop_obsolete)
    return reports


def _obsolete(db: Database, plan: list[IndexSpec], names: dict[str, str],
              current: dict[str, list[dict[str, Any]]], *, drop: bool) -> list[IndexReport]:
    """Indexes on our collections that the plan does not have (by keys and name)."""
    planned = {(names[s.collection], s.keys) for s in plan}
    planned_names = {(names[s.collection], s.name) for s in plan}
    role_of = {name: role for role, name in names.items()}
    reports = []
    for collection_name, indexes in current.items():
        for ix in indexes:
            keys = tuple((k, int(v)) for k, v in ix["key"].items())
            if ix["name"] == "_id_" or (collection_name, keys) in planned \
                    or (collection_name, ix["name"]) in planned_names:
                continue
            options = {k: ix[k] for k in _COMPARED_OPTIONS if k in ix}
            spec = IndexSpec(role_of[collection_name], keys, options,
                             why="not used by this version (init-indexes --drop-obsolete)")
            state = IndexState.OBSOLETE
            if drop:
                db[collection_name].drop_index(ix["name"])
                state = IndexState.DROPPED
            reports.append(IndexReport(spec, collection_name, state, f"name {ix['name']}"))
    return reports

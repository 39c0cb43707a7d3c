"""The collections and indexes of a queue: plan, compare with the server, create.

Indexes get MongoDB's default names (e.g. `status_1_priority_-1_created_at_1`)
so that another program creating the same index meets ours, not a twin.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pymongo.database import Database
from pymongo.errors import CollectionInvalid, OperationFailure

from runnerq_cli.backend.naming import CollectionNames
from runnerq_cli.config import Settings

WORKER_REGISTRY_TTL = 600  # seconds without a heartbeat before a worker entry expires
_COMPARED_OPTIONS = ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression")


class IndexState(StrEnum):
    CREATED = "created"
    PRESENT = "present"
    MISSING = "missing"  # --check / --dry-run: would be created
    CONFLICT = "conflict"  # same keys (or name), other options: never dropped silently


@dataclass(frozen=True)
class IndexSpec:
    collection: str  # role: activities, results, ...
    keys: tuple[tuple[str, int], ...]
    options: dict[str, Any] = field(default_factory=dict)
    why: str = ""

    @property
    def name(self) -> str:
        return "_".join(f"{k}_{d}" for k, d in self.keys)


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


def index_plan(settings: Settings) -> list[IndexSpec]:
    """design.md's minimum, plus the indexes our own queries need."""
    def ttl(seconds: float) -> dict[str, Any]:
        return {"expireAfterSeconds": int(seconds)}

    return [
        IndexSpec("activities", (("status", 1), ("priority", -1), ("created_at", 1)),
                  why="claim order"),
        IndexSpec("activities", (("status", 1), ("scheduled_at", 1)), why="due scheduled work"),
        IndexSpec("activities", (("status", 1), ("lease_deadline", 1)), why="expired leases"),
        IndexSpec("activities", (("idempotency_key", 1),), {"sparse": True},
                  why="idempotency look-ups"),
        IndexSpec("activities", (("status", 1), ("activity_type", 1), ("priority", -1),
                                 ("created_at", 1)), why="claims limited to activity types"),
        IndexSpec("activities", (("status", 1), ("completed_at", -1)),
                  why="recently completed, retention purge"),
        IndexSpec("activities", (("outbox.since", 1),), {"sparse": True},
                  why="repair of outboxes left by a crash"),
        IndexSpec("activities", (("status", 1), ("priority", -1), ("created_at", 1), ("_id", 1)),
                  why="list pending: keyset pages in claim order (list --after)"),
        IndexSpec("activities", (("status", 1), ("scheduled_at", 1), ("_id", 1)),
                  why="list scheduled: keyset pages (list --after)"),
        IndexSpec("activities", (("status", 1), ("completed_at", -1), ("_id", -1)),
                  why="list completed/failed/dead-letter: keyset pages; stats windows"),
        IndexSpec("results", (("created_at", 1),), ttl(settings.results_ttl), why="results TTL"),
        IndexSpec("idempotency", (("created_at", 1),), ttl(settings.idempotency_ttl),
                  why="idempotency keys TTL"),
        IndexSpec("events", (("activity_id", 1), ("timestamp", -1)), why="events of an activity"),
        IndexSpec("events", (("timestamp", 1),), ttl(settings.events_ttl), why="events TTL"),
        IndexSpec("events", (("ingested_at", 1), ("_id", 1)), why="event stream polling"),
        IndexSpec("dead_letter", (("failed_at", -1),), why="dead-letter listing"),
        IndexSpec("workers", (("last_heartbeat", 1),), ttl(WORKER_REGISTRY_TTL),
                  why="stale worker entries expire"),
    ]


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


def ensure_indexes(db: Database, settings: Settings, *, write: bool = True) -> list[IndexReport]:
    """Create what is missing (when `write`), and report every index's state."""
    names = CollectionNames(settings.queue).all()
    if write:
        existing_collections = set(db.list_collection_names())
        for collection_name in names.values():
            if collection_name not in existing_collections:
                with suppress(CollectionInvalid, OperationFailure):  # created meanwhile
                    db.create_collection(collection_name)
    current: dict[str, list[dict[str, Any]]] = {}
    reports = []
    for spec in index_plan(settings):
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
            db[collection_name].create_index(list(spec.keys), name=spec.name, **spec.options)
            state = IndexState.CREATED
        reports.append(IndexReport(spec, collection_name, state, difference))
    return reports

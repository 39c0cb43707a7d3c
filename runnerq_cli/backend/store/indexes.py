"""The collections and indexes of a queue: plan, compare with the server, create.

Indexes get MongoDB's default names (e.g. `status_1_priority_-1_created_at_1`)
so that another program creating the same index meets ours, not a twin.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pymongo import IndexModel

from runnerq_cli.backend.domain.index_specs import IndexSpec, index_plan
from runnerq_cli.backend.domain.index_specs import index_name as index_name  # re-exported
from runnerq_cli.backend.domain.naming import CollectionNames
from runnerq_cli.backend.store.driver import Database
from runnerq_cli.config import Settings
from runnerq_cli.errors import CommandFailed

_COMPARED_OPTIONS = ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression")
# Indexes earlier versions created that this one no longer uses (reported as obsolete).


class IndexState(StrEnum):
    CREATED = "created"
    PRESENT = "present"
    MISSING = "missing"  # --check / --dry-run: would be created
    CONFLICT = "conflict"  # same keys (or name), other options: never dropped silently
    OBSOLETE = "obsolete"  # on our collections, not used by this version: dropped on request
    DROPPED = "dropped"


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


def index_keys(index: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """An index's keys as listIndexes gives them, in the plan's form (IndexSpec.keys)."""
    return tuple((k, int(v)) for k, v in index.get("key", {}).items())


def ensure_indexes(db: Database, settings: Settings, *, write: bool = True,
                   drop_obsolete: bool = False, partitions: int = 1) -> list[IndexReport]:
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
                with suppress(CommandFailed):  # created meanwhile
                    db.create_collection(collection_name)
    current: dict[str, list[dict[str, Any]]] = {}
    reports = []
    missing: dict[str, list[IndexSpec]] = {}  # collection -> indexes to create, in one command
    plan = index_plan(settings, partitions)  # a partitioned queue's plan has three more
    for spec in plan:
        collection_name = names[spec.collection]
        if collection_name not in current:
            current[collection_name] = list(db[collection_name].list_indexes())
        same_keys = [ix for ix in current[collection_name]
                     if index_keys(ix) == spec.keys]
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
            keys = index_keys(ix)
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

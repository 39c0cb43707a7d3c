"""Enqueues that a key decides (docs/design.md, "Idempotency keys" and "Debounce"): a
batch's idempotency keys taken and read, a key moved to a new holder one spec at a
time, a key's holder looked up, the key of a refused activity freed; and a debounced
spec's scheduled activity given the new payload and delayed again.

`Enqueuer` (enqueueing.py) loads this module only for a batch with a keyed or debounced
spec, or to free the key of an activity the server refused, so a plain enqueue does not
compile it (benchmarks/bench_cli_startup.py, uncached byte-code;
tests/test_import_cost.py). The rules of keys are domain/keys.py's (`decide`); the new
activity documents and their insert stay the Enqueuer's (`insert` below).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli import values
from runnerq_cli.backend.domain.keys import (
    KeyPlan,
    Known,
    decide,
    held_outcome,
    key_digest,
    key_id,
    settle,
)
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.domain.outcomes import Outcome
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.servertime import When, server_update
from runnerq_cli.errors import DuplicateKey, IdempotencyConflict

# Enqueuer's insert of the activity of a key just taken: its outcome (a refused one has
# its key freed again).
Insert = Callable[[ActivitySpec, uuid.UUID], Outcome]


def settle_keys(ctx: QueueContext, specs: Sequence[ActivitySpec], groups: dict[bytes, list[int]],
                firsts: dict[bytes, dict[str, Any]], now: datetime, *,
                out: dict[int, Outcome], new_docs: dict[int, dict[str, Any]],
                plan: KeyPlan | None, dry_run: bool, read_first: bool,
                writing: Callable[[], None]) -> list[int]:
    """A batch's keys (Enqueuer.enqueue_batch): every key the batch names (`groups`, the
    specs of each by digest; `firsts`, the new activity of each key's first spec) taken
    in one insert, those another holds read, and each spec decided (`settle`) into `out`
    or `new_docs`; returns the specs that go one by one (`enqueue_one`).

    `read_first` reads the keys before taking any (a caller that records its writes, or
    a dry run, which takes none); `writing` is called before the first write."""
    held = _read_keys(ctx, [key_id(specs[i[0]]) for i in groups.values()]) \
        if read_first else {}
    lost: list[bytes] = []
    if not dry_run:
        free = {d: {"_id": key_id(specs[groups[d][0]]), "activity_id": doc["_id"],
                    "created_at": now, **key_id(specs[groups[d][0]])}
                for d, doc in firsts.items() if d not in held}
        if free:
            writing()
        lost = _take_keys(ctx, free)
        held.update(_read_keys(ctx, [key_id(specs[groups[d][0]]) for d in lost]))
    status_of = _statuses(ctx, [d.get("activity_id") for d in held.values()])
    ttl = timedelta(seconds=ctx.settings.idempotency_ttl)
    return settle(specs, groups, Known(held, status_of, lost, firsts), now, ttl,
                  out, new_docs, plan, dry_run=dry_run)


def debounced(ctx: QueueContext, specs: Sequence[ActivitySpec], at: When,
              ) -> dict[int, uuid.UUID | None]:
    """Each debounced spec's index, with the activity it updated (`_debounce`), or None
    when there was none to update (the caller enqueues it)."""
    return {i: _debounce(ctx, spec, at) for i, spec in enumerate(specs)
            if spec.debounce_seconds is not None}


def _debounce(ctx: QueueContext, spec: ActivitySpec, at: When) -> uuid.UUID | None:
    """A still-scheduled debounced activity of the spec's type and key takes the
    spec's payload and is delayed again (docs/design.md, "Debounce"): its id, or None
    when there is none (the caller enqueues a new one)."""
    assert spec.debounce_seconds is not None
    doc = ctx.activities.find_one_and_update(
        {"activity_type": spec.activity_type, "flow_key": spec.key,
         "status": Status.SCHEDULED.value, "debounce": True},
        server_update({"$set": {
            "payload": dict(spec.payload), "priority": int(spec.priority),
            "scheduled_at": at + timedelta(seconds=spec.debounce_seconds)}}),
        projection={"_id": 1}, sort=[("scheduled_at", 1)])
    return None if doc is None else doc["_id"]


# ------------------------------------------------------------ the batch's commands

def _take_keys(ctx: QueueContext, key_docs: dict[bytes, dict[str, Any]]) -> list[bytes]:
    """Insert the keys (one command); returns those another writer holds."""
    if not key_docs:
        return []
    order = list(key_docs)
    try:
        ctx.idempotency.insert_many(list(key_docs.values()), ordered=False)
    except DuplicateKey as exc:  # every refusal a key another writer holds (failures.refused)
        return [order[int(str(r["index"]))] for r in exc.refusals]
    return []


def _read_keys(ctx: QueueContext, key_ids: list[dict[str, str]]) -> dict[bytes, dict[str, Any]]:
    """The key documents of `key_ids` that exist, by digest (one read)."""
    if not key_ids:
        return {}
    held: dict[bytes, dict[str, Any]] = {}
    for doc in ctx.idempotency.find({"_id": {"$in": key_ids}}).batch_size(len(key_ids) + 1):
        key = doc.get("_id") or {}
        held[key_digest(str(key.get("activity_type")), str(key.get("key")))] = doc
    return held


def _statuses(ctx: QueueContext, ids: list[Any]) -> dict[Any, str]:
    """The status of each of `ids` that exists (one read); "?" for one without a text
    status (another program's malformed holder of a key)."""
    wanted = [i for i in ids if i is not None]
    if not wanted:
        return {}
    return {d["_id"]: _status_text(d) for d in ctx.activities.find(
        {"_id": {"$in": wanted}}, {"status": 1}).batch_size(len(wanted) + 1)}


def release_key(ctx: QueueContext, spec: ActivitySpec, activity_id: uuid.UUID) -> None:
    """The key of a keyed spec, taken for an activity the server refused: free it (if
    still ours). The callers ask only for a spec with a key (a plain one loads nothing)."""
    ctx.idempotency.delete_one({"_id": key_id(spec), "activity_id": activity_id})


# ------------------------------------------------------------ one key at a time

def check_idempotency(ctx: QueueContext, activity_type: str, key: str,
                      activity_id: uuid.UUID) -> tuple[bool, uuid.UUID]:
    """Atomically take `key` for `activity_id`: (True, activity_id) if taken,
    else (False, holder). Keys past the TTL count as free (the TTL monitor
    is late, never early, so the time is checked here).
    """
    key_id = {"activity_type": activity_type, "key": key}
    ttl = timedelta(seconds=ctx.settings.idempotency_ttl)
    for _ in range(10):
        now = ctx.clock()
        try:
            taken = ctx.idempotency.update_one(
                {"_id": key_id},
                {"$setOnInsert": {"activity_id": activity_id, "created_at": now, **key_id}},
                upsert=True,
            )
        except DuplicateKey:  # two upserts raced on a real server: ask again
            continue
        if taken.upserted_id is not None:
            return True, activity_id
        held = ctx.idempotency.find_one({"_id": key_id})
        if held is None:  # expired and deleted in between
            continue
        if held["created_at"] + ttl <= now:
            if _move_key(ctx, key_id, held, activity_id, now):
                return True, activity_id
            continue
        return False, held["activity_id"]
    raise IdempotencyConflict(f"idempotency key {values.shown(key)} is contended; "
                              "try again")


def key_holder(ctx: QueueContext, activity_type: str, key: str) -> uuid.UUID | None:
    """The activity holding the idempotency key `key` of `activity_type`, or None when
    no one does (a key past `idempotency_ttl` is free, as enqueues judge it)."""
    held = ctx.idempotency.find_one({"_id": {"activity_type": activity_type, "key": key}})
    if held is None or not isinstance(held.get("created_at"), datetime):
        return None
    ttl = timedelta(seconds=ctx.settings.idempotency_ttl)
    if held["created_at"] + ttl <= ctx.clock():
        return None
    holder = held.get("activity_id")
    return holder if isinstance(holder, uuid.UUID) else None


def _move_key(ctx: QueueContext, key_id: dict[str, str], held: Mapping[str, Any],
              activity_id: uuid.UUID, now: datetime) -> bool:
    """Compare-and-set the key's holder: exactly one of racing movers wins."""
    moved = ctx.idempotency.update_one(
        {"_id": key_id, "activity_id": held["activity_id"], "created_at": held["created_at"]},
        {"$set": {"activity_id": activity_id, "created_at": now}},
    )
    return moved.modified_count == 1


def enqueue_one(ctx: QueueContext, spec: ActivitySpec,
                new_id: Callable[[ActivitySpec], uuid.UUID], insert: Insert) -> Outcome:
    """A spec whose key changes holder (or raced): take it, or move it by
    compare-and-set, deciding by `decide` as the batch does; again if the key
    moved meanwhile. `new_id` names the activity to insert (the spec's id, else a new
    one), `insert` inserts it once its key is taken."""
    the_key = key_id(spec)
    ttl = timedelta(seconds=ctx.settings.idempotency_ttl)
    assert spec.idempotency_key is not None
    for _ in range(10):
        activity_id = new_id(spec)
        taken, holder_id = check_idempotency(ctx, spec.activity_type, spec.idempotency_key,
                                             activity_id)
        if taken:
            return insert(spec, activity_id)
        holder = ctx.activities.find_one({"_id": holder_id}, {"status": 1})
        held = ctx.idempotency.find_one({"_id": the_key})
        if held is None or held["activity_id"] != holder_id:
            continue  # the key moved meanwhile: look again
        now = ctx.clock()
        status = _status_text(holder) if holder else None
        verdict = decide(spec, held, status, now, ttl)
        if verdict in ("take", "move"):
            if _move_key(ctx, the_key, held, activity_id, now):
                return insert(spec, activity_id)
            continue
        return held_outcome(spec, verdict, holder_id, status or Status.PENDING.value)
    raise IdempotencyConflict(f"idempotency key {values.shown(spec.idempotency_key)} is "
                              "contended; try again")


def _status_text(doc: dict[str, Any]) -> str:
    """A holder's status as answered: "?" for one without a text status (another
    program's malformed document, docs/design.md "Malformed documents")."""
    status = doc.get("status")
    return status if isinstance(status, str) else "?"

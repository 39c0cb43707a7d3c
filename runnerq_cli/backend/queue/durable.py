"""Durable activities' storage operations (docs/design.md, "Durable activities"): the
transitions between `processing`, `waiting` and `pending`, checkpoints, dependencies,
signals, fenced spawns, and the wakes every publication sends.

No operation needs a multi-document transaction. A park writes `waiting` and then reads
the result it waits for; every publisher makes its result visible and then wakes the
waiting activities: one of the two always sees the other (the design's argument). The
windows a crash can leave between two writes of either side are closed by wake repair
(`repair_wakes`), a shared chore.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import bson
from pymongo import ReturnDocument

from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.checkpoints import (
    MAX_SIGNAL_BYTES,
    SERIALIZATION,
    Kind,
    ParkKind,
    Step,
    checked_depth,
    checked_name,
    checkpoint_id,
)
from runnerq_cli.backend.domain.derived import PREVIOUS_SCHEDULE_KEY, attempt_events
from runnerq_cli.backend.domain.documents import Claim, Result
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import AWAITED, SPAWN_FENCE, EnqueueResult, Status
from runnerq_cli.backend.domain.results import checked_result, same_value
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.domain.waits import WAKE_UPDATE, park_update, waiting_one, yielded_detail
from runnerq_cli.backend.queue.attempt_writes import claim_lost, held_by
from runnerq_cli.backend.queue.flow_claims import free_claims
from runnerq_cli.backend.queue.queue import ActivityQueue
from runnerq_cli.backend.store.context import Part, QueueContext
from runnerq_cli.backend.store.servertime import server_update, write_time
from runnerq_cli.backend.store.stamps import insert_stamped, stamp
from runnerq_cli.backend.store.writes import merge_updates, new_event, outbox_update
from runnerq_cli.errors import (
    CheckpointConflict,
    ClaimLost,
    DuplicateKey,
    InvalidArgument,
    NotFound,
)

log = logging.getLogger("runnerq.backend")
# Wake repair: parks older than this are looked at (younger ones may still be reading
# their result), a page at a time, resuming where the last page ended.
REPAIR_GRACE = timedelta(seconds=30)
REPAIR_PAGE = 500


class Durable(Part):
    """The durable storage operations of one queue (reached as `rq.durable`)."""

    def __init__(self, ctx: QueueContext, queue: ActivityQueue) -> None:
        super().__init__(ctx)
        self._queue = queue
        self._repair_after: uuid.UUID | None = None  # wake repair's place in the waiting set

    def now(self) -> datetime:
        """The server's clock as this process knows it (servertime.py): what sleeps and
        deadlines are counted by, so a worker whose own clock is off parks as long as asked."""
        return self._ctx.clock()

    # ------------------------------------------------------------------ the fence

    def _fence(self, claim: Claim, projection: Mapping[str, Any] | None = None,
               ) -> dict[str, Any]:
        """Read the claimed activity under its fence; ClaimLost when it is not held."""
        doc = self._ctx.activities.find_one(held_by(claim), dict(projection or {"_id": 1}))
        if doc is None:
            raise claim_lost(claim)
        return doc

    # ---------------------------------------------------------------- checkpoints

    def checkpoint(self, claim: Claim, result_id: uuid.UUID, state: str, data: Any,
                   step: str | None) -> None:
        """Store a checkpoint once (docs/design.md, "Checkpoints"): the same value again
        succeeds and changes nothing; another value is CheckpointConflict and the first
        stays; a stale claim is ClaimLost, checked first, even for the same value."""
        if state not in ("Ok", "Err"):
            raise InvalidArgument("a checkpoint's state must be Ok or Err")
        data = checked_result(data)
        step = step or None
        self._fence(claim)
        doc = {"_id": result_id, "owner_id": claim.activity_id, "step": step, "state": state,
               "data": data, "serialization": SERIALIZATION, "created_at": self._ctx.clock()}
        try:  # a plain insert: whether it inserted is the answer (a repeat collides)
            self._ctx.checkpoints.insert_one(doc)
        except DuplicateKey:
            stored = self._ctx.checkpoints.find_one({"_id": result_id}) or {}
            if not (stored.get("state") == state and same_value(stored.get("data"), data)
                    and stored.get("owner_id") == claim.activity_id
                    and stored.get("step") == step
                    and stored.get("serialization", SERIALIZATION) == SERIALIZATION):
                raise CheckpointConflict(
                    f"checkpoint conflict: {result_id} already holds another value; the "
                    "first value stays") from None
            return
        self.wake([result_id])

    # --------------------------------------------------------------- dependencies

    def register_dependency(self, claim: Claim, producer: uuid.UUID) -> None:
        """Record that the claimed activity waits on `producer`'s result: NotFound for an
        unknown producer (before the fence, as the spec orders it), then the fence."""
        self._require_activity(producer, "producer")
        self._fence(claim)
        self._depend(claim.activity_id, producer, producer)

    def _require_activity(self, activity_id: uuid.UUID, what: str) -> dict[str, Any]:
        doc = self._ctx.activities.find_one({"_id": activity_id}, {"status": 1,
                                                                    "parent_activity_id": 1})
        if doc is None:
            raise NotFound(f"activity {activity_id} not found (the {what})")
        return doc

    def _depend(self, waiter: uuid.UUID, result_id: uuid.UUID,
                producer: uuid.UUID | None, *, mark: bool = True) -> None:
        """The dependency upsert (a repeat, or a race's loser, changes nothing); a
        producer activity is marked `awaited` first, so its publication wakes (`mark`
        False: a child, marked at its insert)."""
        if producer is not None and mark:
            self._ctx.activities.update_one({"_id": producer, AWAITED: {"$ne": True}},
                                            {"$set": {AWAITED: True}})
        with suppress(DuplicateKey):  # another writer's upsert of the same pair won the race
            self._ctx.dependencies.update_one(
                {"waiter_id": waiter, "result_id": result_id},
                {"$setOnInsert": {"producer_id": producer, "created_at": self._ctx.clock()}},
                upsert=True)

    # ---------------------------------------------------------------------- park

    def park(self, claim: Claim, kind: str, step: str, wake_at: datetime,
             result_id: uuid.UUID | None = None, producer: uuid.UUID | None = None) -> bool:
        """End the attempt without counting it: waiting until `wake_at` or the result
        `result_id` is stored. True when that result was there already (the activity is
        pending at once). A repeat after a lost reply succeeds and writes nothing."""
        kind = ParkKind(kind).value
        step = checked_name(step, "step")
        held = self._ctx.activities.find_one(held_by(claim), {"_id": 1})
        if held is None:
            if self._parked_before(claim, kind, step, wake_at, result_id):
                return False
            raise claim_lost(claim)
        if producer is not None:
            self._require_activity(producer, "producer")
        ready = False
        if result_id is not None:
            self._depend(claim.activity_id, result_id, producer)
            ready = self.result_exists(result_id)
        now = write_time(self._ctx.clock)
        act = claim.activity
        event = new_event(act.id, act.activity_type, EventType.YIELDED.value, now,
                          claim.lease_id)
        event["detail"] = yielded_detail(kind, step, wake_at, result_id, ready)
        # The park overwrites `scheduled_at` (or removes it): keep what the enqueue step is
        # derived from (docs/design.md, "Stored and derived"); outside `detail`, which holds
        # exactly the spec's keys.
        event[PREVIOUS_SCHEDULE_KEY] = act.scheduled_at
        attempt = [] if act.started_at is None else attempt_events(
            act.id, act.activity_type, act.started_at, claim.worker_id, act.retry_count + 1,
            claim.lease_deadline)
        update = merge_updates(
            park_update(ready, kind, step, wake_at, result_id, claim.lease_id, claim.worker_id),
            outbox_update(now, [*attempt, event]))
        if not ready:
            update = merge_updates(update, stamp(self._ctx.clock, now, "parked.at"))
        doc = self._ctx.activities.find_one_and_update(
            held_by(claim), server_update(update), projection={"outbox": 1, "activity_type": 1},
            return_document=ReturnDocument.AFTER)
        if doc is None:
            if self._parked_before(claim, kind, step, wake_at, result_id):
                return False
            raise claim_lost(claim)
        self._ctx.outbox.submit(doc)
        free_claims(self._ctx, [claim])  # parked holds no slot (docs/design.md, "Flow control")
        if not ready and result_id is not None and self.result_exists(result_id):
            # Published between the read above and the park: this read after the park's
            # write is what keeps the two from missing each other.
            self._ctx.activities.update_one(waiting_one(claim.activity_id, result_id),
                                            WAKE_UPDATE)
        return ready

    def _parked_before(self, claim: Claim, kind: str, step: str, wake_at: datetime,
                       result_id: uuid.UUID | None) -> bool:
        """Whether this claim already parked the same way (its `Yielded` event, stored
        or still in the outbox): the first park's reply was lost."""
        def same(event: Mapping[str, Any]) -> bool:
            detail = event.get("detail") or {}
            return (event.get("event_type") == EventType.YIELDED.value
                    and event.get("worker_id") == claim.lease_id
                    and detail.get("kind") == kind and detail.get("step") == step
                    and detail.get("result_id") == result_id
                    and _same_time(detail.get("wake_at"), wake_at))
        doc = self._ctx.activities.find_one({"_id": claim.activity_id}, {"outbox.events": 1})
        if doc is not None and any(same(e) for e in (doc.get("outbox") or {}).get("events", ())):
            return True
        return any(same(e) for e in self._ctx.events.find(
            {"activity_id": claim.activity_id, "event_type": EventType.YIELDED.value,
             "worker_id": claim.lease_id}))

    # ------------------------------------------------------------------- results

    def result_exists(self, result_id: uuid.UUID) -> bool:
        """Whether `result_id` names a published result: an activity's own (the
        visibility rule) or a checkpoint."""
        return self.get_result(result_id) is not None

    def get_result(self, result_id: uuid.UUID) -> Result | None:
        """An activity's own result by the visibility rule, else the checkpoint with that
        id, else None (docs/design.md, "Reading a result")."""
        if self._ctx.activities.find_one({"_id": result_id}, {"_id": 1}) is not None:
            return self._queue.get_result(result_id)
        doc = self._ctx.checkpoints.find_one({"_id": result_id})
        if doc is None:
            return None
        return Result(result_id, str(doc.get("state")), doc.get("data"), doc.get("created_at"))

    def steps(self, owner: uuid.UUID) -> list[Step]:
        """The activity's checkpoints with a step name, oldest first."""
        found = []
        for doc in self._ctx.checkpoints.find({"owner_id": owner}).sort(
                [("created_at", 1), ("_id", 1)]):
            step = doc.get("step")
            if not isinstance(step, str):
                continue
            kind, _, name = step.partition(":")
            found.append(Step(kind, name, str(doc.get("state")), doc.get("data"),
                              doc.get("created_at"), doc["_id"]))
        return found

    def children(self, parent: uuid.UUID, offset: int = 0, limit: int = 100,
                 ) -> list[dict[str, Any]]:
        """The activities `parent` spawned, oldest first (raw documents, payload left out)."""
        return list(self._ctx.activities.find(
            {"parent_activity_id": parent}, {"payload": 0, "outbox": 0}).sort(
                [("created_at", 1), ("_id", 1)]).skip(offset).limit(limit))

    def subtree(self, root: uuid.UUID) -> list[dict[str, Any]]:
        """The root and every activity of its tree, by depth then age (raw documents)."""
        docs = list(self._ctx.activities.find(
            {"$or": [{"_id": root}, {"root_activity_id": root}]}, {"payload": 0, "outbox": 0}))
        return sorted(docs, key=lambda d: (int(d.get("depth") or 0),
                                           d.get("created_at") or datetime.min.replace(
                                               tzinfo=UTC), str(d["_id"])))

    def wake(self, result_ids: Iterable[uuid.UUID]) -> int:
        """Wake every activity waiting on one of `result_ids`; how many."""
        ids = list(result_ids)
        if not ids:
            return 0
        return self._ctx.activities.update_many(queries.waiters_of(ids).filter,
                                                WAKE_UPDATE).modified_count

    # -------------------------------------------------------------------- signals

    def signal(self, target: uuid.UUID, name: str, payload: Any) -> bool:
        """Store a signal for `target` (the last one wins) and wake it if it waits; True
        when it woke it. NotFound for an unknown target (nothing stored). Not idempotent:
        a second signal replaces the first and wakes again."""
        name = checked_name(name, "signal name")
        payload = checked_result(payload, "the signal's payload")
        if len(bson.encode({"data": payload})) > MAX_SIGNAL_BYTES:
            raise InvalidArgument(f"the signal's payload is larger than {MAX_SIGNAL_BYTES} "
                                  "bytes as BSON")
        target_doc = self._ctx.activities.find_one({"_id": target}, {"activity_type": 1})
        if target_doc is None:
            raise NotFound(f"activity {target} not found: the signal was not stored")
        signal_id = checkpoint_id(target, Kind.SIGNAL.value, name)
        now = self._ctx.clock()
        self._ctx.checkpoints.replace_one(
            {"_id": signal_id},
            {"_id": signal_id, "owner_id": target, "step": f"signal:{name}", "state": "Ok",
             "data": payload, "serialization": SERIALIZATION, "created_at": now},
            upsert=True)
        woke = self._ctx.activities.update_one(waiting_one(target), WAKE_UPDATE).modified_count
        event = new_event(target, target_doc.get("activity_type"), EventType.SIGNALED.value,
                          now, None, name=name, signal_id=signal_id, woke=bool(woke))
        insert_stamped(self._ctx.events, event, "ingested_at", self._ctx.clock, now)
        return bool(woke)

    def signal_by_key(self, activity_type: str, key: str, name: str, payload: Any) -> bool:
        """`signal` to the activity holding the idempotency key (`activity_type`, `key`):
        what a producer that enqueued with a key knows, without the id (the spec's
        SignalByKey). NotFound when no activity holds that key (nothing stored)."""
        name = checked_name(name, "signal name")
        if not isinstance(activity_type, str) or not isinstance(key, str) or not key:
            raise InvalidArgument("signal by key: the activity type and key must be text")
        held = self._ctx.idempotency.find_one({"_id": {"activity_type": activity_type,
                                                       "key": key}}, {"activity_id": 1})
        if held is None or not isinstance(held.get("activity_id"), uuid.UUID):
            raise NotFound(f"no activity of type {activity_type!r} holds the key {key!r}: "
                           "the signal was not stored")
        return self.signal(held["activity_id"], name, payload)

    # ------------------------------------------------------------------ spawning

    def spawn(self, claim: Claim, spec: ActivitySpec) -> EnqueueResult:
        """Enqueue a child of the claimed activity, fenced on the claim: a stale claim is
        ClaimLost and nothing at all is written (docs/design.md, "Spawning")."""
        parent = self._fence(claim, {"root_activity_id": 1, "depth": 1})
        root = parent.get("root_activity_id") or claim.activity_id
        depth = checked_depth(int(parent.get("depth") or 0) + 1)
        child_spec = replace(spec, parent_id=claim.activity_id, root_id=root, depth=depth,
                             spawn_fence=claim.lease_id)
        for _ in range(2):
            result = self._enqueue_child(child_spec)
            if result.created:
                break
            if self._link(claim, result.activity_id):
                return result
        else:
            raise ClaimLost("the spawn's child keeps being withdrawn: another claim is "
                            "spawning the same step")
        self._depend(claim.activity_id, result.activity_id, result.activity_id, mark=False)
        if self._ctx.activities.find_one(held_by(claim), {"_id": 1}) is None:
            self._withdraw_spawn(result.activity_id, child_spec, claim.lease_id)
            raise claim_lost(claim)
        self._confirm_spawn(result.activity_id, claim.lease_id)
        return result

    def _enqueue_child(self, spec: ActivitySpec) -> EnqueueResult:
        """The child's enqueue. Its key naming no activity was left by a spawn that died
        between the key and the child (of an earlier claim: this claim holds the fence
        now), so the key is taken over at once rather than after the orphan grace."""
        for _ in range(2):
            [outcome] = self._queue.enqueue_batch([spec])
            result = outcome.result()
            if isinstance(result, Exception):
                raise result
            if result.created or spec.idempotency_key is None or self._ctx.activities.find_one(
                    {"_id": result.activity_id}, {"_id": 1}) is not None:
                return result
            self._ctx.idempotency.delete_one(
                {"_id": {"activity_type": spec.activity_type, "key": spec.idempotency_key},
                 "activity_id": result.activity_id})
        raise ClaimLost("the spawn's key keeps changing hands: another claim is spawning "
                        "the same step")

    def _confirm_spawn(self, child: uuid.UUID, lease_id: str) -> bool:
        """The fence held after the insert: the child becomes claimable, pending, or
        scheduled when it was delayed (one update: its `scheduled_at` says which)."""
        return bool(self._ctx.activities.update_one(
            {"_id": child, SPAWN_FENCE: lease_id},
            [{"$set": {"status": {"$cond": [{"$eq": [{"$type": "$scheduled_at"}, "date"]},
                                            Status.SCHEDULED.value, Status.PENDING.value]}}},
             {"$unset": SPAWN_FENCE}]).modified_count)

    def _withdraw_spawn(self, child: uuid.UUID, spec: ActivitySpec | None, fence: str) -> None:
        """Undo an unconfirmed spawn: the child, its key and its dependency. Only a child
        still under `fence`: one confirmed meanwhile (by a replay or repair) keeps all."""
        if not self._ctx.activities.delete_one({"_id": child, SPAWN_FENCE: fence}
                                               ).deleted_count:
            return
        self._ctx.dependencies.delete_many({"producer_id": child})
        if spec is not None and spec.idempotency_key is not None:
            self._ctx.idempotency.delete_one(
                {"_id": {"activity_type": spec.activity_type, "key": spec.idempotency_key},
                 "activity_id": child})

    def _link(self, claim: Claim, child: uuid.UUID) -> bool:
        """A keyed spawn that found its child already there: depend on it, and note a
        child of another parent (`SpawnLinked`). Its own child that an earlier claim's
        crash left unconfirmed, this claim (the parent's live one) confirms, fenced on
        the stale fence (else wake repair would withdraw the child this replay waits
        on); False when that child was withdrawn first: spawn it again."""
        doc = self._ctx.activities.find_one({"_id": child}, {"parent_activity_id": 1,
                                                             SPAWN_FENCE: 1})
        if doc is None:
            return False
        if (doc.get("parent_activity_id") == claim.activity_id and SPAWN_FENCE in doc
                and not self._confirm_spawn(child, str(doc[SPAWN_FENCE]))
                and self._ctx.activities.find_one(
                    {"_id": child, SPAWN_FENCE: {"$exists": False}}, {"_id": 1}) is None):
            return False
        self._depend(claim.activity_id, child, child)
        if doc.get("parent_activity_id") not in (None, claim.activity_id):
            now = self._ctx.clock()
            event = new_event(child, None, EventType.SPAWN_LINKED.value, now, None,
                              parent_activity_id=claim.activity_id)
            insert_stamped(self._ctx.events, event, "ingested_at", self._ctx.clock, now)
        return True

    # ------------------------------------------------------------------ repair

    def repair_wakes(self, page: int = REPAIR_PAGE, grace: timedelta = REPAIR_GRACE) -> int:
        """Wake repair (a shared chore): waiting activities parked more than the grace ago
        whose result exists are woken; unconfirmed spawns are settled. A page of the
        waiting set per call, resuming after the last one. Returns how many it fixed."""
        now = self._ctx.clock()
        query: dict[str, Any] = {"status": Status.WAITING.value,
                                 "$or": [{"waiting_result_id": {"$exists": True}},
                                         {SPAWN_FENCE: {"$exists": True}}]}
        if self._repair_after is not None:
            query["_id"] = {"$gt": self._repair_after}
        docs = list(self._ctx.activities.find(
            query, {"waiting_result_id": 1, "parked": 1, SPAWN_FENCE: 1, "created_at": 1,
                    "parent_activity_id": 1}).sort("_id", 1).limit(page))
        self._repair_after = docs[-1]["_id"] if len(docs) == page else None
        fixed = 0
        for doc in docs:
            if SPAWN_FENCE in doc:
                fixed += self._settle_spawn(doc, now, grace * 2)
                continue
            parked_at = (doc.get("parked") or {}).get("at")
            if isinstance(parked_at, datetime) and parked_at > now - grace:
                continue
            result_id = doc.get("waiting_result_id")
            if isinstance(result_id, uuid.UUID) and self.result_exists(result_id):
                fixed += self._ctx.activities.update_one(
                    waiting_one(doc["_id"], result_id), WAKE_UPDATE).modified_count
        if fixed:
            log.info("wake repair: woke parked activities whose result was there",
                     extra={"fields": {"woken": fixed}})
        return fixed

    def _settle_spawn(self, doc: Mapping[str, Any], now: datetime, grace: timedelta) -> int:
        """A spawn a crash left unconfirmed: confirmed while its parent still holds the
        claim it was made under, withdrawn otherwise (the spawn never answered)."""
        created = doc.get("created_at")
        if isinstance(created, datetime) and created > now - grace:
            return 0
        parent = self._ctx.activities.find_one(
            {"_id": doc.get("parent_activity_id"), "status": Status.PROCESSING.value,
             "lease_id": doc.get(SPAWN_FENCE)}, {"_id": 1})
        if parent is not None:
            self._confirm_spawn(doc["_id"], str(doc.get(SPAWN_FENCE)))
        else:
            full = self._ctx.activities.find_one({"_id": doc["_id"]},
                                                 {"activity_type": 1, "idempotency_key": 1})
            spec = None
            if full is not None and isinstance(full.get("idempotency_key"), str):
                spec = ActivitySpec(str(full.get("activity_type")),
                                    idempotency_key=full["idempotency_key"])
            self._withdraw_spawn(doc["_id"], spec, str(doc.get(SPAWN_FENCE)))
        return 1


def _same_time(stored: Any, asked: datetime) -> bool:
    """Dates as stored (milliseconds, maybe naive UTC) against one asked for."""
    if not isinstance(stored, datetime):
        return False
    def millis(value: datetime) -> int:
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    return millis(stored) == millis(asked)



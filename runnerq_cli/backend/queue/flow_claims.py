"""The claim of limited activity types (docs/design.md, "A limited claim"): the key whose
turn it is, a slot taken by one conditional update of the type's limit document, then
the claim of that key's next activity under the lease the slot names; and the release
of slots when claims end.

A type without a limit never comes here: its claim is the plain one (claims.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument

from runnerq_cli.backend.domain import flow, queries
from runnerq_cli.backend.domain.documents import Claim
from runnerq_cli.backend.domain.index_specs import index_name
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.flowstate import REFRESH

# The claim of one key's work under a slot (claims.Claims.claim_under_slot): given, not
# imported, so that claims.py may import this module.
ClaimUnderSlot = Callable[[str, str, str, str, float], "Claim | None"]

log = logging.getLogger("runnerq.flow")

# What the claimer reads of a limit document (everything but the audit fields).
STATE_PROJECTION = {"updated_at": 0, "actor": 0}
MOST_KEY_TRIES = 50  # keys looked at by one claim of a type before it gives up for now


def plain_scope(types: Iterable[str] | None, exclude_types: Iterable[str] | None,
                limited: frozenset[str]) -> tuple[list[str] | None, list[str] | None]:
    """The plain claim's scope once limited types are taken out: its own `types` less
    the limited ones ([] when none is left: no plain claim), or every type around the
    paused and the limited ones."""
    if types is not None:
        return [t for t in types if t not in limited], None
    return None, sorted({*(exclude_types or ()), *limited}) or None


def limited_scope(types: Iterable[str] | None, exclude_types: Iterable[str] | None,
                  limited: frozenset[str]) -> list[str]:
    """The limited types this claim may take (its own types, less the paused)."""
    excluded = set(exclude_types or ())
    wanted = limited if types is None else limited & set(types)
    return sorted(t for t in wanted if t not in excluded)


class LimitedClaims:
    """One claimer's limited claims of one call of `dequeue`."""

    def __init__(self, claim_under_slot: ClaimUnderSlot, ctx: QueueContext, worker_id: str,
                 lease_seconds: float, on_claim: Callable[[Claim], None] | None) -> None:
        self._claim_under_slot, self._ctx = claim_under_slot, ctx
        self._worker_id, self._lease_seconds = worker_id, lease_seconds
        self._on_claim = on_claim

    def claim(self, types: list[str], want: int) -> list[Claim]:
        """Up to `want` claims of the limited `types`, each under a slot."""
        got: list[Claim] = []
        for activity_type in types:
            if len(got) >= want:
                break
            if self._ctx.flow.blocked(activity_type):
                continue
            got += self._claim_type(activity_type, want - len(got))
        return got

    def _claim_type(self, activity_type: str, want: int) -> list[Claim]:
        doc = self._ctx.limits.find_one({"_id": activity_type}, STATE_PROJECTION)
        if doc is None:  # removed since this process read the list
            self._ctx.flow.expire()
            return []
        now = self._ctx.clock()
        if self._type_full(doc, now):
            doc = self._repaired(doc, now)
            if self._type_full(doc, now, block=True):
                return []
        skip = set(flow.full_keys(doc, now))
        turn = doc.get("turn") if isinstance(doc.get("turn"), str) else None
        got: list[Claim] = []
        for _ in range(MOST_KEY_TRIES):
            if len(got) >= want:
                break
            key = self._next_key(activity_type, turn, skip)
            if key is None:
                break
            lease_id = uuid.uuid4().hex
            taken = self._ctx.limits.find_one_and_update(
                {"_id": activity_type},
                flow.take_pipeline(key, lease_id, self._worker_id,
                                   round(self._lease_seconds * 1000)),
                projection=STATE_PROJECTION, return_document=ReturnDocument.AFTER)
            if taken is None:
                self._ctx.flow.expire()
                break
            if not flow.took(taken, lease_id):
                self._ctx.flow.throttle(activity_type)
                if self._type_full(taken, now, block=True):
                    break
                skip.add(key)  # this key is at its own limit: the next key's turn
                continue
            claim = self._claim_under_slot(activity_type, key, self._worker_id, lease_id,
                                           self._lease_seconds)
            turn = key
            if claim is None:  # nothing of the key left (or set aside): the slot back
                self._ctx.limits.update_one({"_id": activity_type}, flow.give_back(lease_id))
                skip.add(key)
                continue
            got.append(claim)
            if self._on_claim is not None:
                self._on_claim(claim)
        if len(got) < want and skip:
            self._note_keys(doc, skip, now)
        return got

    def _type_full(self, doc: dict[str, Any], now: datetime, *, block: bool = False) -> bool:
        """Whether nothing of the type may start now; with `block`, this claimer then
        leaves the type alone until the rate allows a start; when full by concurrency,
        FULL_BACKOFF, or, told of every slot freed (a change stream), until told or a
        holder's `until` comes (its slot may be repaired then: no write says so)."""
        verdict = flow.verdict(doc, None, now)
        if verdict.type_full and block:
            told = self._ctx.flow.told
            if verdict.retry_at is not None:
                wait = max(0.05, (verdict.retry_at - now).total_seconds())
            elif told:
                until = flow.next_holder_until(doc, now)
                wait = flow.TOLD_BACKOFF if until is None else max(
                    0.05, (until - now).total_seconds())
            else:
                wait = flow.FULL_BACKOFF
            self._ctx.flow.block(str(doc["_id"]),
                                 min(wait, flow.TOLD_BACKOFF if told else REFRESH))
            self._ctx.flow.throttle(str(doc["_id"]))
        return verdict.type_full

    def _note_keys(self, doc: dict[str, Any], skipped: set[str], now: datetime) -> None:
        """Keys left out by their own rate start again at a time no write announces: a
        worker waiting to be told looks again then (FlowState.wake_by)."""
        times = [v.retry_at for v in (flow.verdict(doc, k, now) for k in skipped)
                 if v.retry_at is not None]
        until = flow.next_holder_until(doc, now)
        if until is not None:
            times.append(until)
        if times:
            self._ctx.flow.wake_by(max(0.05, (min(times) - now).total_seconds()))

    def _next_key(self, activity_type: str, turn: str | None, skip: set[str]) -> str | None:
        """The next key after `turn` with pending work, in key order, wrapping around;
        "" (the activities without a key) when no key has any (docs/design.md)."""
        projection = {"flow_key": 1, "_id": 0}
        for after in ([turn, None] if turn else [None]):
            query = queries.next_key(activity_type, after, skip)
            doc = self._ctx.activities.find_one(query.filter, projection, sort=query.sort_list)
            if doc is not None and isinstance(doc.get("flow_key"), str):
                return str(doc["flow_key"])
        if flow.NO_KEY in skip:
            return None
        query = queries.keyed_claim(activity_type, flow.NO_KEY)
        return flow.NO_KEY if self._ctx.activities.find_one(query.filter, {"_id": 1}) else None

    def _repaired(self, doc: dict[str, Any], now: datetime) -> dict[str, Any]:
        """Holders past their `until` whose lease no longer runs are freed (a crash between
        a slot and its claim or release; docs/design.md, "Stale holders"); never one whose
        activity still runs under its lease."""
        stale = [h["l"] for h in flow.entries(doc, "holders")
                 if isinstance(h.get("until"), datetime) and h["until"] < now
                 and isinstance(h.get("l"), str)]
        if not stale:
            return doc
        query = queries.running_leases(stale)
        running = {d.get("lease_id") for d in self._ctx.activities.find(
            query.filter, {"lease_id": 1, "_id": 0}).hint(
            index_name(self._ctx.settings, "expired leases"))}
        dead = [lease for lease in stale if lease not in running]
        if not dead:
            return doc
        log.info("flow: freed slots whose claims no longer run",
                 extra={"fields": {"activity_type": doc["_id"], "freed": len(dead)}})
        repaired = self._ctx.limits.find_one_and_update(
            {"_id": doc["_id"]}, flow.repair(dead, now),
            projection=STATE_PROJECTION, return_document=ReturnDocument.AFTER)
        return repaired if repaired is not None else doc


def free_slots(ctx: QueueContext, held: Iterable[tuple[Any, str]]) -> None:
    """Release the slots of ended claims: `held` pairs each activity's `slot` (the limit
    document it names, None for a plain claim) with the claim's lease id. One update per
    limited type; a failure is only logged (the stale-holder repair frees it later)."""
    by_type: dict[str, list[str]] = {}
    for slot, lease_id in held:
        if isinstance(slot, str):
            by_type.setdefault(slot, []).append(lease_id)
    for activity_type, leases in by_type.items():
        try:
            ctx.limits.update_one({"_id": activity_type}, flow.release(leases))
            ctx.flow.unblock(activity_type)
        except Exception as exc:  # the repair frees what this missed
            log.warning("flow: a slot release failed; the repair frees it after its lease",
                        extra={"fields": {"activity_type": activity_type,
                                          "error": str(exc)}})


def free_claims(ctx: QueueContext, claims: Iterable[Claim]) -> None:
    """`free_slots` of ended claims (a plain claim has no `slot`: nothing sent)."""
    free_slots(ctx, [(c.activity.extra.get("slot"), c.lease_id) for c in claims])

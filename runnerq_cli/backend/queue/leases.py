"""A held claim's lease (docs/design.md, "Leases"): extended while the handler runs,
or given back at shutdown without counting an attempt. Both are fenced on the claim.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo import ReturnDocument

from runnerq_cli.backend.domain.documents import Claim
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import AckOutcome, Status
from runnerq_cli.backend.domain.partitions import term as partition_term
from runnerq_cli.backend.queue.attempt_writes import (
    LEASE_FIELDS,
    OUTBOX_PROJECTION,
    claim_lost,
    ended_attempt,
    held_by,
    lease_length,
)
from runnerq_cli.backend.queue.flow_claims import free_claims
from runnerq_cli.backend.store.context import Part
from runnerq_cli.backend.store.servertime import server_update, write_time
from runnerq_cli.backend.store.writes import merge_updates, new_event, outbox_update
from runnerq_cli.errors import ActivityCancelled, ClaimLost

ACK_OUTCOMES = frozenset(o.value for o in AckOutcome)
CANCELLED_OUTCOME = "cancelled"  # an operator's cancel ended the claim (ops/actions.py)


class Leases(Part):
    """`extend_lease`, `report_progress` and `release` of a held claim."""

    def extend_lease(self, claim: Claim, seconds: float | None = None) -> bool:
        """Move the lease deadline to now + `seconds`; False if this claim already ended.

        Raises ClaimLost if the activity was reclaimed by someone else.
        """
        now = write_time(self._ctx.clock)
        deadline = now + timedelta(seconds=lease_length(seconds, self._ctx.settings.lease))
        event = new_event(claim.activity_id, claim.activity.activity_type,
                          EventType.LEASE_EXTENDED.value, now, claim.worker_id,
                          lease_deadline=deadline)
        doc = self._ctx.activities.find_one_and_update(
            held_by(claim),
            server_update(merge_updates({"$set": {"lease_deadline": deadline}},
                                        outbox_update(now, [event]))),
            projection=OUTBOX_PROJECTION, return_document=ReturnDocument.AFTER)
        if doc is not None:
            self._ctx.outbox.submit(doc)
            return True
        how = self._ended_how(claim)
        if how in ACK_OUTCOMES:
            return False
        raise _lost_as(claim, how)

    def _ended_how(self, claim: Claim) -> str | None:
        """How this claim ended, where the activity says (`last_outcome` under its own
        `last_lease_id`): an acknowledgement's outcome, "cancelled", or None (taken by
        another claim, or gone)."""
        doc = self._ctx.activities.find_one(
            {"_id": claim.activity_id, **partition_term(claim.activity.partition),
             "last_lease_id": claim.lease_id}, {"last_outcome": 1})
        return None if doc is None else doc.get("last_outcome")

    def lost(self, claim: Claim) -> ClaimLost:
        """The error of a refused write of `claim`: `ActivityCancelled` when an operator's
        cancel ended it (docs/design.md, "Cancelling a running activity"), else ClaimLost.
        One read by id, made only once a write was refused."""
        return _lost_as(claim, self._ended_how(claim))

    def report_progress(self, claim: Claim, progress: dict[str, Any]) -> None:
        """Store a running attempt's progress (docs/design.md, "Progress"), with its
        `Progress` event through the outbox; fenced on the claim (refused: ClaimLost, or
        ActivityCancelled). `progress` is checked already (domain/progress.py)."""
        now = write_time(self._ctx.clock)
        stored = {**progress, "attempt": claim.activity.retry_count + 1, "updated_at": now}
        event = new_event(claim.activity_id, claim.activity.activity_type,
                          EventType.PROGRESS.value, now, claim.worker_id,
                          **{k: v for k, v in stored.items() if k != "updated_at"})
        doc = self._ctx.activities.find_one_and_update(
            held_by(claim),
            server_update(merge_updates({"$set": {"progress": stored}},
                                        outbox_update(now, [event]))),
            projection=OUTBOX_PROJECTION, return_document=ReturnDocument.AFTER)
        if doc is None:
            raise self.lost(claim)
        self._ctx.outbox.submit(doc)

    def release(self, claim: Claim, reason: str = "released by worker") -> bool:
        """Give a held activity back to the queue without counting an attempt.

        Used at shutdown for work that could not finish; False if not held.
        """
        now = write_time(self._ctx.clock)
        event = new_event(claim.activity_id, claim.activity.activity_type,
                          EventType.REQUEUED.value, now, claim.worker_id, reason=reason,
                          started_at=claim.activity.started_at)
        doc = self._ctx.activities.find_one_and_update(
            held_by(claim),
            server_update(merge_updates(
                {"$set": {"status": Status.PENDING.value},
                 "$unset": {**LEASE_FIELDS, "started_at": ""}},
                outbox_update(now, [*ended_attempt(claim), event]))),
            projection=OUTBOX_PROJECTION, return_document=ReturnDocument.AFTER)
        self._ctx.outbox.submit(doc)
        if doc is not None:
            free_claims(self._ctx, [claim])  # a limited claim's slot frees (flow_claims.py)
        return doc is not None


def _lost_as(claim: Claim, how: str | None) -> ClaimLost:
    if how == CANCELLED_OUTCOME:
        return ActivityCancelled(f"activity {claim.activity_id} was cancelled by an operator: "
                                 f"lease {claim.lease_id} is over")
    return claim_lost(claim)

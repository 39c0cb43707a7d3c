"""A held claim's lease (docs/design.md, "Leases"): extended while the handler runs,
or given back at shutdown without counting an attempt. Both are fenced on the claim.
"""

from __future__ import annotations

from datetime import timedelta

from pymongo import ReturnDocument

from runnerq_cli.backend.domain.models import AckOutcome, Claim, EventType, Status
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


class Leases(Part):
    """`extend_lease` and `release` of a held claim."""

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
        if self._ctx.activities.count_documents(
            {"_id": claim.activity_id, **partition_term(claim.activity.partition),
             "last_lease_id": claim.lease_id,
             "last_outcome": {"$in": sorted(o.value for o in AckOutcome)}}, limit=1
        ):
            return False
        raise claim_lost(claim)

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

"""What the writes of an attempt share: the claim, its acknowledgement, its lease, the
reaper (maintenance.py) and the set-aside of a malformed activity (aside.py).

The fence of a write that takes a claim, the lease fields it clears, the errors of a
claim lost or contradicted, and the one update that dead-letters an activity live here,
below every writer, so each writer imports them and none imports another writer.
"""

from __future__ import annotations

from typing import Any

from runnerq_cli.backend.domain.derived import attempt_events
from runnerq_cli.backend.domain.documents import Activity, Claim
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import AWAITED, AckOutcome, Status
from runnerq_cli.backend.domain.partitions import term as partition_term
from runnerq_cli.backend.store.servertime import When
from runnerq_cli.backend.store.writes import merge_updates, new_event, outbox_update
from runnerq_cli.errors import CheckpointConflict, ClaimLost, InvalidArgument

LEASE_FIELDS = {"worker_id": "", "lease_id": "", "lease_deadline": ""}
# What an acknowledgement returns: only what the outbox flush needs.
OUTBOX_PROJECTION = {"outbox": 1, "activity_type": 1, AWAITED: 1, "parent_activity_id": 1}


def dead_letter_update(act: Activity, error: str, now: When, worker_id: str | None,
                       lease_id: str | None) -> dict[str, Any]:
    """The one update that dead-letters `act`: its state, event, Err result and record.
    The event's `reason` is RunnerQ's (events.schema.json): `lease_expired` when the reaper
    ends it (no claim: `lease_id` None), `attempts_exhausted` otherwise."""
    reason = "lease_expired" if lease_id is None else "attempts_exhausted"
    dead = new_event(act.id, act.activity_type, EventType.DEAD_LETTER.value, now, worker_id,
                     error=error, reason=reason, retry_count=act.retry_count,
                     attempt=act.retry_count + 1, started_at=act.started_at)
    state: dict[str, Any] = {"status": Status.DEAD_LETTER.value, "completed_at": now,
                             "last_error": error, "last_error_at": now,
                             "last_outcome": AckOutcome.DEAD_LETTERED.value}
    if worker_id is not None:
        state["last_worker_id"] = worker_id
    unset = dict(LEASE_FIELDS)
    if lease_id is not None:
        state["last_lease_id"] = lease_id
    else:  # the reaper: no claim acknowledged this, and no earlier one may answer for it
        unset["last_lease_id"] = ""
    return merge_updates(
        {"$set": state, "$unset": unset},
        outbox_update(now, [dead],
                      result=err_result(error, "dead_letter", now, act.extra.get("claims")),
                      dead_letter={"error": error, "failed_at": now}),
    )


def flush_projection(update: dict[str, Any]) -> dict[str, int] | None:
    """What the outbox flush needs back: the outbox, or everything for a dead-letter record
    (it keeps a snapshot of the activity)."""
    return None if "outbox.dead_letter" in update.get("$set", {}) else OUTBOX_PROJECTION


# A success's extra fence for an activity nothing waited on when it was claimed
# (docs/design.md, "Waking").
UNAWAITED = {AWAITED: {"$exists": False}}


def awaited(claim: Claim) -> bool:
    """Whether something waited on the claimed activity when it was claimed (a child, or
    one marked `awaited`): its success then wakes."""
    extra = claim.activity.extra
    return bool(extra.get(AWAITED)) or extra.get("parent_activity_id") is not None


def held_by(claim: Claim) -> dict[str, Any]:
    """The fence of every write that takes a claim: the activity, still running under it
    (in its partition: the whole shard key, so it goes to one shard)."""
    return held_by_lease(claim.activity_id, claim.lease_id,
                         partition_term(claim.activity.partition))


def held_by_lease(activity_id: Any, lease_id: str,
                  partition: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"_id": activity_id, **(partition or {}), "lease_id": lease_id,
            "status": Status.PROCESSING.value}


def claim_lost(claim: Claim) -> ClaimLost:
    return ClaimLost(f"claim lost: activity {claim.activity_id} is no longer held by lease "
                     f"{claim.lease_id}")


def checkpoint_conflict(claim: Claim) -> CheckpointConflict:
    return CheckpointConflict(f"checkpoint conflict: activity {claim.activity_id} was already "
                              f"completed by lease {claim.lease_id} with another result")


def lease_length(asked: float | None, default: float) -> float:
    """The lease asked for, else the configured one; never zero or negative."""
    seconds = default if asked is None else asked
    if not seconds > 0:
        raise InvalidArgument(f"lease must be longer than 0 seconds, got {seconds!r}")
    return seconds


def err_result(error: str, kind: str, now: When, claim_number: int | None) -> dict[str, Any]:
    """An Err result, with the claim it ends (so an older claim's late success cannot
    replace it)."""
    return {"state": "Err", "data": {"error": error, "type": kind}, "created_at": now,
            "claim": int(claim_number or 0)}


def ended_attempt(claim: Claim) -> list[dict[str, Any]]:
    """The attempt's derived Dequeued/Started, stored because `started_at` is cleared."""
    act = claim.activity
    if act.started_at is None:
        return []
    return attempt_events(act.id, act.activity_type, act.started_at, claim.worker_id,
                          act.retry_count + 1, claim.lease_deadline)

"""The durable state machine's statements, named in one place (docs/design.md, "Durable
activities"): what a park writes, what a wake matches and writes, what the scheduler
makes due. Pure: the queue layer (queue/durable.py) sends them.

Every wake is the same transition, whoever sends it (a result's publisher, a signal, the
scheduler at a wait's deadline, wake repair): `waiting` to `pending`, the wait's fields
removed, so the ordinary claim takes the activity again without counting an attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.models import Status

# The fields of a wait, removed by every wake.
WAIT_FIELDS = {"waiting_result_id": "", "parked": "", "scheduled_at": ""}
# Marks an activity some other activity waits on: its publication must wake (a success's
# acknowledgement then sends a wake; a plain one does not).
AWAITED = "awaited"
# A child inserted under a spawn's fence, not yet confirmed (docs/design.md, "Spawning").
SPAWN_FENCE = "spawn_fence"

WAKE_UPDATE: dict[str, Any] = {"$set": {"status": Status.PENDING.value},
                               "$unset": dict(WAIT_FIELDS)}


def waiting_on(result_ids: Iterable[uuid.UUID]) -> dict[str, Any]:
    """Waiting activities whose awaited result is one of `result_ids`
    (`waiting_result_id_1_waiting`)."""
    return {"status": Status.WAITING.value, "waiting_result_id": {"$in": list(result_ids)}}


def waiting_one(activity_id: uuid.UUID, result_id: uuid.UUID | None = None,
                ) -> dict[str, Any]:
    """One waiting activity (waiting on `result_id`, when given)."""
    query: dict[str, Any] = {"_id": activity_id, "status": Status.WAITING.value}
    if result_id is not None:
        query["waiting_result_id"] = result_id
    return query


def due_waits(now: datetime) -> dict[str, Any]:
    """Waiting activities whose wake time has come (the scheduler wakes them). The
    `$gte: EVER`-free form: a date range; a wait with no date (a spawn not confirmed yet)
    never comes due."""
    return {"status": Status.WAITING.value, "scheduled_at": {"$type": "date", "$lte": now},
            SPAWN_FENCE: {"$exists": False}}


def park_update(ready: bool, kind: str, step: str, wake_at: datetime,
                result_id: uuid.UUID | None, lease_id: str, worker_id: str,
                ) -> dict[str, Any]:
    """The state part of a park: waiting with its wake time and what it waits for, or,
    the result being there already, pending at once. The attempt is not counted and its
    `started_at` stays; the lease goes."""
    state: dict[str, Any] = {"last_lease_id": lease_id, "last_worker_id": worker_id}
    unset: dict[str, str] = {"worker_id": "", "lease_id": "", "lease_deadline": ""}
    if ready:
        state["status"] = Status.PENDING.value
        unset.update(WAIT_FIELDS)
    else:
        state.update(status=Status.WAITING.value, scheduled_at=wake_at,
                     parked={"kind": kind, "step": step})
        if result_id is not None:
            state["waiting_result_id"] = result_id
        else:
            unset["waiting_result_id"] = ""
    return {"$set": state, "$unset": unset}


def yielded_detail(kind: str, step: str, wake_at: datetime, result_id: uuid.UUID | None,
                   ready: bool) -> dict[str, Any]:
    """The `Yielded` event's detail: exactly the spec's keys."""
    return {"kind": kind, "step": step, "wake_at": wake_at, "result_id": result_id,
            "ready": ready}

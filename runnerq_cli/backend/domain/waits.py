"""The durable state machine's statements, named in one place (docs/design.md, "Durable
activities"): what a park writes, what a wake matches and writes, what the scheduler
makes due. Pure: the queue layer (queue/durable.py) sends them.

Every wake is the same transition, whoever sends it (a result's publisher, a signal, the
scheduler at a wait's deadline, wake repair): `waiting` to `pending`, the wait's fields
removed, so the ordinary claim takes the activity again without counting an attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.models import SPAWN_FENCE, Status, display_status, to_jsonable

# The fields of a wait, removed by every wake.
WAIT_FIELDS = {"waiting_result_id": "", "parked": "", "scheduled_at": ""}

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


@dataclass(frozen=True)
class Wait:
    """What a waiting activity waits for: `kind` sleep, signal or await (or `unknown`
    for a wait another program wrote without `parked`)."""

    kind: str
    step: str | None
    since: datetime | None
    until: datetime | None  # when it wakes by itself (a sleep's end, a wait's deadline)
    result_id: uuid.UUID | None = None
    producer: Mapping[str, Any] | None = None  # the awaited activity, as read

    @property
    def name(self) -> str | None:
        """The name the handler gave (`approve`), without the `kind:` prefix our worker's
        park stores in `step` (`signal:approve`, `sleep:nap`, `child:ship:p1`)."""
        if self.step is None:
            return None
        prefix = {"sleep": "sleep:", "signal": "signal:", "await": "child:"}.get(self.kind)
        return self.step.removeprefix(prefix) if prefix else self.step

    def describe(self, when: Callable[[datetime | None], str]) -> str:
        """In words: "waiting for signal approve since ..., times out ..."; "waiting for
        child 3f2a1b2c since ...; the child is running on worker w1"; "sleeping until ...".
        The "since" is the wait's (when the park happened); the awaited child's state is
        said apart, as of now, so it never reads as the child's own age."""
        if self.kind == "sleep":
            return f"sleeping until {when(self.until)}" + (f" (step {self.name})"
                                                         if self.name else "")
        child_state = None
        if self.kind == "signal":
            text = f"waiting for signal {self.name}"
        elif self.kind == "await":
            text, child_state = self._producer_text()
        else:
            text = "waiting" + (f" for result {self.result_id}" if self.result_id else "")
        if self.since is not None:
            text += f" since {when(self.since)}"
        if self.until is not None:
            text += f", times out {when(self.until)}"
        elif self.kind != "await" or self.result_id is None:
            text += "; no wake time: it never wakes by itself"
        if child_state is not None:
            text += f"; the child is {child_state}"
        return text

    def _producer_text(self) -> tuple[str, str | None]:
        """What is awaited ("waiting for child 3f2a1b2c") and the child's state now
        ("pending", "running on worker w1"), or None when no activity produces it."""
        short = str(self.result_id)[:8] if self.result_id else "?"
        if self.producer is None:
            return (f"waiting for result {short} (no activity produces it: gone, or a "
                    "checkpoint)"), None
        status = str(self.producer.get("status"))
        if status == Status.PROCESSING.value:
            worker = self.producer.get("worker_id")
            return f"waiting for child {short}", "running" + (
                f" on worker {worker}" if worker else "")
        return f"waiting for child {short}", display_status(
            status, int(self.producer.get("retry_count") or 0))

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "step": self.step, "name": self.name,
               "since": to_jsonable(self.since), "until": to_jsonable(self.until),
               "result_id": str(self.result_id) if self.result_id else None}
        if self.kind == "await":
            out["producer_status"] = (str(self.producer.get("status"))
                                      if self.producer is not None else None)
        return out


def wait_of(doc: Mapping[str, Any], producer: Mapping[str, Any] | None = None) -> Wait | None:
    """The wait of a waiting activity's document (None for any other status)."""
    if doc.get("status") != Status.WAITING.value:
        return None
    raw = doc.get("parked")
    parked: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    result_id = doc.get("waiting_result_id")
    kind = str(parked.get("kind") or ("await" if result_id else "unknown"))
    since = parked.get("at") if isinstance(parked.get("at"), datetime) else None
    until = doc.get("scheduled_at") if isinstance(doc.get("scheduled_at"), datetime) else None
    step = parked.get("step") if isinstance(parked.get("step"), str) else None
    return Wait(kind, step, since, until,
                result_id if isinstance(result_id, uuid.UUID) else None, producer)

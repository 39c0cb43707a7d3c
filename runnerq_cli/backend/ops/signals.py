"""A signal sent by an operator (the `signal` command, the console): the storage
operation (queue/durable.py, `Durable.signal`) behind the checks a person needs.

The storage operation stores a signal for any existing activity, as the spec's does; an
operator's signal to a finished activity can never be read by anything, so it is refused
(WrongState, exit 9) with nothing written. Every check (name, payload, target) comes
before the audit record, so bad input leaves no trace; the record is written before the
signal, as every operator action's is (ops/audit.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import bson

from runnerq_cli.backend.domain.checkpoints import MAX_SIGNAL_BYTES, checked_name
from runnerq_cli.backend.domain.models import TERMINAL_STATUSES, Status, parse_activity_id
from runnerq_cli.backend.domain.results import checked_result
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.queue.durable import Durable
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import InvalidArgument, NotFound, WrongState


@dataclass(frozen=True)
class SignalSent:
    """What a signal did: the target, its status as found, and whether it woke it."""

    activity_id: uuid.UUID
    activity_type: str
    name: str
    status: str
    woke: bool

    def to_json(self) -> dict[str, Any]:
        return {"action": "signal", "id": str(self.activity_id),
                "activity_type": self.activity_type, "name": self.name,
                "status": self.status, "woke": self.woke}


@dataclass(frozen=True)
class SignalTarget:
    """A signal as checked, before anything is written: its target as found, the name,
    the payload as given (checked), whether it wakes the target (any waiting activity
    is woken, to replay) and whether the target waits for that very signal now (the
    console's preview shows both)."""

    activity_id: uuid.UUID
    activity_type: str
    name: str
    payload: Any
    status: str
    wakes: bool
    awaited: bool

    def to_json(self) -> dict[str, Any]:
        return {"id": str(self.activity_id), "activity_type": self.activity_type,
                "name": self.name, "payload": self.payload, "status": self.status,
                "wakes": self.wakes, "awaited": self.awaited}


class Signals:
    """Operator signals of one queue (reached as `rq.signals`)."""

    def __init__(self, ctx: QueueContext, durable: Durable, audit: AuditLog) -> None:
        self._ctx = ctx
        self._durable = durable
        self._audit = audit

    def send(self, activity_id: uuid.UUID | str, name: str, payload: Any = None, *,
             reason: str | None = None, actor: str | None = None,
             command: str | None = None) -> SignalSent:
        """Signal a live activity: InvalidArgument (a bad name or payload), NotFound (no
        such activity) or WrongState (it finished) with nothing written; otherwise the
        audit record, then the signal (which wakes the activity if it waits)."""
        target = self.check(activity_id, name, payload)
        aid, name = target.activity_id, target.name
        with self._audit.begin("signal", reason=reason, actor=actor, name=name,
                               command=command) as run:
            woke = self._durable.signal(aid, name, payload)
            run.progress([aid])
            run.finish("done", woke=woke)
        return SignalSent(aid, target.activity_type, name, target.status, woke)

    def check(self, activity_id: uuid.UUID | str, name: str,
              payload: Any = None) -> SignalTarget:
        """Every check `send` makes, writing nothing (the console's preview): the same
        InvalidArgument, NotFound and WrongState; one read of the target."""
        aid = parse_activity_id(activity_id)
        name = checked_name(name, "signal name")
        # checked here; the storage operation encodes it
        stored = checked_result(payload, "the signal's payload")
        if len(bson.encode({"data": stored})) > MAX_SIGNAL_BYTES:
            raise InvalidArgument(f"the signal's payload is larger than {MAX_SIGNAL_BYTES:,} "
                                  "bytes (1 MiB) as BSON")
        doc = self._ctx.activities.find_one({"_id": aid}, {"status": 1, "activity_type": 1,
                                                           "parked": 1})
        if doc is None:
            raise NotFound(f"activity {aid} not found: the signal was not stored")
        status = str(doc.get("status"))
        if status in TERMINAL_STATUSES:
            raise WrongState(f"cannot signal activity {aid}: it is {status} (finished), so "
                             "nothing would ever read the signal; nothing was stored",
                             status=status)
        raw = doc.get("parked")
        parked: dict[str, Any] = raw if isinstance(raw, dict) else {}
        wakes = status == Status.WAITING.value
        # Our worker's park stores `signal:NAME`; another program's may store the name.
        awaited = wakes and parked.get("kind") == "signal" and parked.get("step") in (
            name, f"signal:{name}")
        return SignalTarget(aid, str(doc.get("activity_type")), name, payload, status, wakes,
                            awaited)

"""The operator actions as one table: from which statuses, to which, with which event, fenced
on what, and when a rerun has nothing left to do (docs/design.md, "Operator actions").

Pure rules, no I/O: the one-activity methods (operator.py), the batches (batches.py) and
the selection by filter (bulk.py) all read `ACTIONS`, so an action is defined once.

An action writes from the document as read (`plan_update`): the state change, the
event's detail (the "previous" values) and the event. An action's `done` rule says,
as a filter, when an activity is already where the action would put it (the same
priority, already scheduled at that time): a bulk action run again after an
interruption skips those instead of writing the same change twice (issue 23, "Reruns
do nothing twice").
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runnerq_cli.backend.domain.derived import attempt_events
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.models import (
    TERMINAL_STATUSES,
    UNSUCCESSFUL_STATUSES,
    WAITING_STATUSES,
    MalformedDocument,
    Status,
    to_jsonable,
)
from runnerq_cli.backend.domain.partitions import term_of
from runnerq_cli.backend.domain.shapes import ACTIVITY, Shape
from runnerq_cli.backend.domain.waits import WAIT_FIELDS
from runnerq_cli.backend.store.servertime import When
from runnerq_cli.backend.store.writes import merge_updates, new_event, outbox_update
from runnerq_cli.errors import InvalidArgument, WrongState

OPERATOR = "operator"  # the worker_id recorded on operator events
# What a retry or redrive clears: the outcome of the previous run. The lease
# fields are already absent on a terminal activity; `last_lease_id` goes too,
# so a late repeat ack of the old claim is answered "claim lost", not replayed.
RESTART_UNSET = {"completed_at": "", "last_outcome": "", "last_lease_id": "",
                 "scheduled_at": "", "started_at": "", "outbox.dead_letter": "",
                 "outbox.result": ""}
# What an action by filter expects to be unchanged since the operator saw it.
EXPECT_FIELDS = ("status", "retry_count", "priority", "completed_at")
SNAPSHOT_FIELDS = {"activity_type": 1, "status": 1, "completed_at": 1, "retry_count": 1,
                   "priority": 1, "created_at": 1, "last_error": 1}
# What every state change is fenced on (`fence_of`): a claim, an acknowledgement or
# another operator's change in between moves one of them.
FENCE_FIELDS = ("status", "priority", "completed_at", "lease_id", "retry_count")
Expect = dict[str, Any] | None
Doc = dict[str, Any]
Params = dict[str, Any]
# Cancel reaches a parked durable activity too (it holds no worker), and a running one
# through its claim (docs/design.md, "Cancelling a running activity").
NOT_RUNNING_CANCELLABLE = (*WAITING_STATUSES, Status.WAITING)
CANCELLABLE = (*NOT_RUNNING_CANCELLABLE, Status.PROCESSING)
# What a running activity's cancel clears: its claim and its progress.
CLAIM_FIELDS = {"worker_id": "", "lease_id": "", "lease_deadline": "", "progress": ""}


@dataclass(frozen=True)
class Action:
    """One operator action: its row of the table."""

    name: str
    from_states: tuple[Status, ...]
    to_state: Status | None  # None: the status stays (set-priority) or the activity goes
    event: EventType | None  # None: no event (a deleted activity keeps none)
    # The state update, from the document as read (no outbox part).
    state: Callable[[Doc, When, Params], Doc] | None = None
    # The event's detail: the "previous" values, and the new ones.
    detail: Callable[[Doc, Params], Doc] | None = None
    # Already where the action would put it: a rerun skips it (a query on documents).
    done: Callable[[Params], Doc] | None = None
    by_filter: bool = True  # selectable by a filter (bulk.py); redrive has its own
    fence: tuple[str, ...] = field(default=FENCE_FIELDS)
    # What a filter without statuses selects (None: every `from_states`); cancel leaves
    # running work out unless the filter names `processing`.
    filter_states: tuple[Status, ...] | None = None

    @property
    def from_values(self) -> list[str]:
        return [s.value for s in self.from_states]

    @property
    def default_states(self) -> tuple[Status, ...]:
        """The statuses a filter that names none selects."""
        return self.filter_states if self.filter_states is not None else self.from_states


def _cancel_state(doc: Doc, now: When, params: Params) -> Doc:
    # No claim ended it: an earlier claim's late acknowledgement is a lost claim. A
    # waiting activity's wait goes with it (nothing wakes a cancelled one).
    state: Doc = {"status": Status.CANCELLED.value, "completed_at": now,
                  "last_outcome": "cancelled"}
    unset = {"last_lease_id": ""}
    if doc.get("status") == Status.WAITING.value:
        unset.update(WAIT_FIELDS)
    if doc.get("status") == Status.PROCESSING.value:
        # The claim ends here: its holder's next renewal reads `last_lease_id` (its own)
        # with `last_outcome: "cancelled"` and learns an operator ended it.
        unset = dict(CLAIM_FIELDS)
        state["last_lease_id"] = doc.get("lease_id")
        if doc.get("worker_id") is not None:
            state["last_worker_id"] = doc["worker_id"]
    return {"$set": state, "$unset": unset}


def cancel_result(doc: Doc, now: When, reason: str | None) -> Doc:
    """A cancelled activity's own Err result (docs/design.md, "Cancelling a tree"): its
    waiters wake with it. It carries the claim count, so no earlier claim's late
    result replaces it."""
    error = "activity cancelled" + (f": {reason}" if reason else "")
    return {"state": "Err", "data": {"error": error, "type": "cancelled", "failed_at": now},
            "created_at": now, "claim": int(doc.get("claims") or 0)}


def _restart_state(doc: Doc, now: When, params: Params) -> Doc:
    return {"$set": {"status": Status.PENDING.value, "retry_count": 0},
            "$unset": dict(RESTART_UNSET)}


def _restart_detail(doc: Doc, params: Params) -> Doc:
    return {"previous_status": doc["status"], "previous_retry_count": doc.get("retry_count", 0)}


ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("cancel", CANCELLABLE, Status.CANCELLED, EventType.CANCELLED,
           state=_cancel_state,
           detail=lambda doc, params: {"previous_status": doc["status"]},
           filter_states=NOT_RUNNING_CANCELLABLE),
    Action("retry", UNSUCCESSFUL_STATUSES, Status.PENDING,
           EventType.RETRIED, state=_restart_state, detail=_restart_detail),
    Action("run-now", (Status.SCHEDULED, Status.WAITING), Status.PENDING, EventType.RUN_NOW,
           state=lambda doc, now, params: {"$set": {"status": Status.PENDING.value},
                                           "$unset": dict(WAIT_FIELDS)},
           detail=lambda doc, params: {"previous_scheduled_at": doc.get("scheduled_at")}),
    Action("reschedule", WAITING_STATUSES, Status.SCHEDULED, EventType.RESCHEDULED,
           state=lambda doc, now, params: {"$set": {"status": Status.SCHEDULED.value,
                                                    "scheduled_at": params["at"]}},
           detail=lambda doc, params: {"previous_status": doc["status"],
                                       "previous_scheduled_at": doc.get("scheduled_at"),
                                       "scheduled_at": params["at"]},
           done=lambda params: {"status": Status.SCHEDULED.value,
                                "scheduled_at": params["at"]}),
    Action("set-priority", WAITING_STATUSES, None, EventType.PRIORITY_CHANGED,
           state=lambda doc, now, params: {"$set": {"priority": int(params["priority"])}},
           detail=lambda doc, params: {"old_priority": doc.get("priority"),
                                       "new_priority": int(params["priority"])},
           done=lambda params: {"priority": int(params["priority"])}),
    Action("delete", TERMINAL_STATUSES, None, None,
           fence=("status", "completed_at")),
    Action("redrive", (Status.DEAD_LETTER,), Status.PENDING, EventType.REDRIVEN,
           state=_restart_state, detail=_restart_detail, by_filter=False),
)}


def action(name: str) -> Action:
    """The action named `name`; InvalidArgument naming the known ones otherwise."""
    found = ACTIONS.get(name)
    if found is None:
        raise InvalidArgument(f"unknown action {name!r}: use one of {', '.join(ACTIONS)}")
    return found


@dataclass(frozen=True)
class ActionResult:
    """What one action did to one activity."""

    action: str
    activity_id: uuid.UUID
    activity_type: str
    previous_status: str
    status: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "id": str(self.activity_id), "ok": True,
                "activity_type": self.activity_type, "previous_status": self.previous_status,
                "status": self.status, "detail": to_jsonable(self.detail)}


class Changed(WrongState):
    """The activity is no longer what an operator was shown: skipped, nothing written."""


def note(reason: str | None, actor: str | None) -> dict[str, Any]:
    """The operator's reason and name, for an event's detail."""
    return {"reason": reason, "actor": actor}


def plan_update(name: str, doc: Doc, now: When, params: Params,
                note: dict[str, Any]) -> tuple[Doc, Doc, Doc]:
    """(the whole update with its outbox event, the event's detail, the event)."""
    row = ACTIONS[name]
    if row.state is None or row.detail is None or row.event is None:
        raise InvalidArgument(f"{name} is not a state change")
    info = {k: v for k, v in {**row.detail(doc, params), **note}.items() if v is not None}
    event = new_event(doc["_id"], doc.get("activity_type"), row.event.value, now, OPERATOR,
                      **info)
    state = row.state(doc, now, params)
    result = cancel_result(doc, now, note.get("reason")) if name == "cancel" else None
    update = merge_updates(state, outbox_update(now, _kept_steps(doc, state, event),
                                                result=result))
    return update, info, event


def fence_of(doc: Doc, fields: tuple[str, ...] = FENCE_FIELDS) -> Doc:
    """The filter that makes an update apply only to `doc` as it was read: its id and
    `fields` as read (the retry count only where the document has one)."""
    fence = {"_id": doc["_id"], **term_of(doc)}  # its partition too: one shard
    for name in fields:
        if name != "retry_count" or name in doc:
            fence[name] = doc.get(name)
    return fence


def snapshot_of(doc: Doc) -> Doc:
    """The fields an action by filter re-checks: a change to any of them skips the activity."""
    return {name: doc.get(name) for name in EXPECT_FIELDS}


# What an action reads of the document it acts on (the fields present; a delete reads none).
_ACTED_ON = Shape("activity", ACTIVITY.types, ("_id",))


def check(before: Doc, name: str, aid: uuid.UUID, expect: Expect) -> None:
    """Raise MalformedDocument (the plans read its fields: act only on what reads right),
    WrongState (not an eligible status) or Changed (not what was shown)."""
    status = str(before.get("status"))
    problem = None if name == "delete" else _ACTED_ON.problem(before)
    if problem is not None:
        raise MalformedDocument(f"cannot {name} activity {aid}: its document is malformed "
                                f"({problem}); correct the field or delete it")
    if expect is not None:
        moved = [f"{key} {expect.get(key)!s} -> {before.get(key)!s}" for key in expect
                 if before.get(key) != expect.get(key)]
        if moved:
            raise Changed(f"{name} {aid}: skipped, it changed since it was shown "
                          f"({'; '.join(moved)})", status=status)
    allowed = ACTIONS[name].from_values
    if status not in allowed:
        raise WrongState(_wrong_state_message(name, aid, status, allowed), status=status)


def _kept_steps(before: Doc, state: Doc, event: Doc) -> list[Doc]:
    """The action's event, with what it overwrites that readers derive events from.

    A cleared `started_at` takes the last attempt's derived steps with it: they
    are stored now (derived.attempt_events). A changed schedule is kept in the
    event's detail, so the enqueue step is still shown as it was.
    """
    touched = {name for op in ("$set", "$unset") for name in state.get(op, {})}
    if "scheduled_at" in touched and event["event_type"] not in (
            EventType.RUN_NOW.value, EventType.RESCHEDULED.value):
        event["detail"]["previous_scheduled_at"] = before.get("scheduled_at")
    steps = []
    if "started_at" in touched and before.get("started_at") is not None:
        steps = attempt_events(before["_id"], before.get("activity_type"), before["started_at"],
                               before.get("worker_id") or before.get("last_worker_id"),
                               int(before.get("retry_count") or 0) + 1)
    return [*steps, event]


def _wrong_state_message(name: str, aid: uuid.UUID, status: str, allowed: list[str]) -> str:
    shown = "running" if status == Status.PROCESSING.value else status
    text = f"cannot {name} activity {aid}: it is {shown}; {name} applies to " \
           f"{' or '.join(allowed)} activities"
    if status == Status.PROCESSING.value:
        text += " (a worker holds it: wait for the attempt to end)"
    return text

"""RunnerQ's stored events, restated from the spec's `schema/postgres/events.schema.json`
(0.8.0, commit 5c70a12), with what docs/design.md stores beyond it said apart.

The spec: per event type, the `detail` keys every implementation writes (required or
optional), of these types, and no other key. On MongoDB a `date-time` is a BSON date and
a `uuid` a BSON UUID. The spec's runner checks every event a scenario stored against it,
and (0.7) that an event ending an attempt names its worker.

OURS lists what our design stores that the spec does not: extra detail keys on four of
its types, and three types it stopped storing at 0.7 (docs/design.md, "Stored and
derived"). They are checked too, against design.md, never waved through; a difference
between the two is reported by the test (tests/test_conformance.py, DIFFERENCES).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

Check = Callable[[Any], bool]


def text(value: Any) -> bool:
    return isinstance(value, str)


def date(value: Any) -> bool:
    return isinstance(value, datetime)


def an_id(value: Any) -> bool:
    return isinstance(value, uuid.UUID)


def boolean(value: Any) -> bool:
    return isinstance(value, bool)


def anything(value: Any) -> bool:
    return True


def integer(minimum: int | None = None) -> Check:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and (
        minimum is None or v >= minimum)


def number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def one_of(*values: str) -> Check:
    return lambda v: v in values


def either(*checks: Check) -> Check:
    return lambda v: any(check(v) for check in checks)


def null(value: Any) -> bool:
    return value is None


# type -> (required keys, optional keys), each key's check. The spec's.
COMMAND = {"command_id": text}
SPEC: dict[str, tuple[dict[str, Check], dict[str, Check]]] = {
    "Retrying": ({"started_at": date, "error": text, "retry_count": integer(1),
                  "scheduled_at": date}, {"failure": anything}),
    "Failed": ({"started_at": date, "error": text}, {"failure": anything}),
    "DeadLetter": ({"started_at": date, "error": text,
                    "reason": one_of("attempts_exhausted", "lease_expired")},
                   {"failure": anything}),
    "Requeued": ({"started_at": date, "reason": one_of("lease_expired"), "error": text,
                  "retry_count": integer(1)}, {}),
    "Yielded": ({"kind": one_of("sleep", "signal", "await"), "step": text, "wake_at": date,
                 "result_id": either(an_id, null), "ready": boolean}, {}),
    "Signaled": ({"name": text, "signal_id": an_id, "woke": boolean},
                 {"command_id": text, "reason": text}),
    "SpawnLinked": ({"parent_activity_id": an_id}, {}),
    "Cancelled": ({**COMMAND, "from": text}, {"reason": text}),
    "Retried": ({**COMMAND, "from": text, "reset_attempts": boolean}, {"reason": text}),
    "Redriven": ({**COMMAND, "from": text, "reset_attempts": boolean}, {"reason": text}),
    "RunNow": (COMMAND, {"reason": text}),
    "Rescheduled": ({**COMMAND, "at": date}, {"reason": text}),
    "PriorityChanged": ({**COMMAND, "priority": one_of(1, 2, 3, 4)}, {"reason": text}),  # type: ignore[arg-type]
}

# What docs/design.md ("Stored and derived", "Failure", "Lease expiry") stores beyond the
# spec: detail keys added to the spec's types, and types the spec no longer stores.
OURS_EXTRA_KEYS: dict[str, dict[str, Check]] = {
    "Retrying": {"attempt": integer(1), "delay_seconds": number,
                 "previous_scheduled_at": either(date, null)},
    "Failed": {"attempt": integer(1), "retryable": boolean},
    "DeadLetter": {"attempt": integer(1), "retry_count": integer(0)},
    "Requeued": {"attempt": integer(1), "lease_deadline": date,
                 "previous_scheduled_at": either(date, null)},
}
OURS_TYPES: dict[str, tuple[dict[str, Check], dict[str, Check]]] = {
    # extend_lease: the new deadline (the spec's 0.7 stores no renewal).
    "LeaseExtended": ({"lease_deadline": date}, {}),
    # An ended attempt's derived steps, materialized when `started_at` is cleared.
    "Dequeued": ({"attempt": integer(1)}, {}),
    "Started": ({"attempt": integer(1)}, {"lease_deadline": date}),
}
# Events that end an attempt name its worker (the spec's runner, 0.7).
ENDS_AN_ATTEMPT = ("Retrying", "Failed", "DeadLetter", "Requeued", "Yielded")


def problems(event: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what breaks the schema, what design.md stores beyond the spec) for one stored event.

    A spec type is checked against the spec's keys, plus the keys OURS_EXTRA_KEYS adds
    (each of its own type); a type the spec no longer stores against OURS_TYPES. The
    second list names the design.md extensions the event uses: not failures, the
    differences the test reports."""
    kind, detail = event.get("event_type"), event.get("detail") or {}
    if kind in OURS_TYPES:
        required, optional = OURS_TYPES[kind]
        broken = _shape(str(kind), detail, required, optional)
        if kind in ("Dequeued", "Started") and event.get("materialized") is not True:
            broken.append(f"{kind}: stored, but not as a materialized derived step")
        return broken, [f"{kind}: stored (the spec's 0.7 stores no {kind})"]
    if kind not in SPEC:
        return [f"{kind}: not a known event type"], []
    required, optional = SPEC[kind]
    extra = OURS_EXTRA_KEYS.get(kind, {})
    broken = _shape(str(kind), detail, required, {**optional, **extra})
    if kind in ENDS_AN_ATTEMPT and not event.get("worker_id"):
        broken.append(f"{kind}: ends an attempt but names no worker")
    added = sorted(k for k in detail if k in extra)
    return broken, [f"{kind}: detail adds {', '.join(added)}"] if added else []


def _shape(kind: str, detail: dict[str, Any], required: dict[str, Check],
           optional: dict[str, Check]) -> list[str]:
    out = [f"{kind}: detail lacks {key}" for key in required if key not in detail]
    for key, value in detail.items():
        check = required.get(key) or optional.get(key)
        if check is None:
            out.append(f"{kind}: detail has {key}, which no schema lists")
        elif not check(value):
            out.append(f"{kind}: detail {key} = {value!r} is not of its type")
    return out

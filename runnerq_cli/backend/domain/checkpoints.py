"""Durable activities' ids, keys and bounds (docs/design.md, "Durable activities"): pure
values another implementation computes the same way.

`checkpoint_id` is RunnerQ's (the spec's vectors/checkpoint_id.json): RFC 9562 UUIDv5
with the activity's id as the namespace and `kind:name` as the name, which is exactly
`uuid.uuid5`. `step_key` is the idempotency key of a spawn with a step name, so a replay
re-attaches to the child its earlier run spawned.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runnerq_cli.backend.domain.models import to_jsonable
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted

# How deep a tree may grow: a deeper spawn is refused before anything is written.
MAX_DEPTH = 32
# Names of steps, sleeps and signals: code points.
MAX_NAME = 200
# A signal's payload as BSON (a checkpoint's value is bounded as a result is).
MAX_SIGNAL_BYTES = 1024 * 1024
SERIALIZATION = "json-v1"


class Kind(StrEnum):
    """Kinds of checkpoint ids; `signalwait` is a signal wait's deadline record."""

    RUN = "run"
    SLEEP = "sleep"
    SIGNAL = "signal"
    SIGNAL_WAIT = "signalwait"


class ParkKind(StrEnum):
    """What a parked activity waits for."""

    SLEEP = "sleep"
    SIGNAL = "signal"
    AWAIT = "await"


def checkpoint_id(activity_id: uuid.UUID, kind: str, name: str) -> uuid.UUID:
    """RunnerQ's checkpoint id: UUIDv5 of the activity id's 16 bytes and `kind:name`."""
    return uuid.uuid5(activity_id, f"{kind}:{name}")


def step_key(root_id: uuid.UUID, parent_id: uuid.UUID, step: str) -> str:
    """The idempotency key of a spawn named `step` (lowercase ids, the step verbatim)."""
    return f"rq:step:{str(root_id).lower()}:{str(parent_id).lower()}:{step}"


def checked_name(value: Any, what: str = "name") -> str:
    """A step, sleep or signal name: 1-200 code points of text, no NUL; else
    InvalidArgument naming it (nothing is written)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be text, got {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{what} must not be empty")
    if len(value) > MAX_NAME:
        raise InvalidArgument(f"{what} is {counted(len(value), 'character')} long; at most "
                              f"{MAX_NAME}")
    if "\x00" in value:
        raise InvalidArgument(f"{what} must not contain NUL")
    return value


def checked_timeout(value: Any, what: str = "timeout") -> float:
    """A wait's timeout in seconds: a finite number, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{what} must be a finite number of seconds, 0 or more, "
                              f"got {value!r}")
    return float(value)


def checked_depth(depth: int) -> int:
    """A child's depth: within MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise InvalidArgument(f"the tree would be {depth} deep; at most {MAX_DEPTH}")
    return depth


@dataclass(frozen=True)
class Step:
    """One checkpoint with a step name, as `steps` reads it."""

    kind: str
    name: str
    state: str
    data: Any
    created_at: Any
    checkpoint_id: uuid.UUID

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "state": self.state,
                "data": to_jsonable(self.data), "created_at": to_jsonable(self.created_at),
                "checkpoint_id": str(self.checkpoint_id)}

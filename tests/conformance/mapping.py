"""The spec's tables and columns read from our documents (docs/design.md, "The spec's
columns and ours"), and the matchers of our scenario format.

The spec's runner checks Postgres rows; ours checks the MongoDB documents the driver
wrote, through the one table below, so each expectation means on our data what it means
on the spec's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

Doc = dict[str, Any]


def _field(name: str) -> Callable[[Doc], Any]:
    return lambda doc: doc.get(name)


def _status(doc: Doc) -> Any:
    """The spec's `retrying` is our `scheduled` with failed attempts (models.display_status)."""
    if doc.get("status") == "scheduled" and (doc.get("retry_count") or 0) > 0:
        return "retrying"
    return doc.get("status")


# The mapping: (spec table, spec column) -> (our collection, how our document says it).
# `activities` rows are activity documents; `results` rows are either an activity's own
# result (results collection, visibility rule applied: see `own_result`) or a checkpoint.
MAPPING: dict[tuple[str, str], tuple[str, Callable[[Doc], Any]]] = {
    ("runnerq_activities", "status"): ("activities", _status),
    ("runnerq_activities", "current_worker_id"): ("activities", _field("lease_id")),
    ("runnerq_activities", "last_worker_id"): ("activities", _field("last_lease_id")),
    ("runnerq_activities", "lease_deadline_ms"): ("activities", _field("lease_deadline")),
    ("runnerq_activities", "scheduled_at"): ("activities", _field("scheduled_at")),
    ("runnerq_activities", "started_at"): ("activities", _field("started_at")),
    ("runnerq_activities", "completed_at"): ("activities", _field("completed_at")),
    ("runnerq_activities", "created_at"): ("activities", _field("created_at")),
    ("runnerq_activities", "retry_count"): ("activities", lambda d: d.get("retry_count", 0)),
    ("runnerq_activities", "max_attempts"): ("activities", lambda d: d.get("max_retries", 3)),
    ("runnerq_activities", "priority"): ("activities", _field("priority")),
    ("runnerq_activities", "activity_type"): ("activities", _field("activity_type")),
    ("runnerq_activities", "last_error"): ("activities", _field("last_error")),
    ("runnerq_activities", "parent_activity_id"): ("activities", _field("parent_activity_id")),
    ("runnerq_activities", "root_activity_id"):
        ("activities", lambda d: d.get("root_activity_id") or d["_id"]),
    ("runnerq_activities", "depth"): ("activities", lambda d: d.get("depth", 0)),
    ("runnerq_activities", "waiting_result_id"): ("activities", _field("waiting_result_id")),
    # An activity's own result: `_id` is the activity, no step, json-v1.
    ("runnerq_results", "id"): ("results", _field("_id")),
    ("runnerq_results", "state"): ("results", _field("state")),
    ("runnerq_results", "data"): ("results", _field("data")),
    ("runnerq_results", "owner_activity_id"): ("results", _field("_id")),
    ("runnerq_results", "step"): ("results", lambda d: None),
    ("runnerq_results", "serialization"): ("results", lambda d: "json-v1"),
    # A checkpoint, sleep record or signal payload.
    ("runnerq_results", "checkpoint:id"): ("checkpoints", _field("_id")),
    ("runnerq_results", "checkpoint:state"): ("checkpoints", _field("state")),
    ("runnerq_results", "checkpoint:data"): ("checkpoints", _field("data")),
    ("runnerq_results", "checkpoint:owner_activity_id"): ("checkpoints", _field("owner_id")),
    ("runnerq_results", "checkpoint:step"): ("checkpoints", _field("step")),
    ("runnerq_results", "checkpoint:serialization"):
        ("checkpoints", lambda d: d.get("serialization") or "json-v1"),
}

TERMINAL = ("completed", "failed", "dead_letter")


def column(table: str, name: str, doc: Doc, checkpoint: bool = False) -> Any:
    key = (table, f"checkpoint:{name}" if checkpoint else name)
    if key not in MAPPING:
        raise AssertionError(f"{table} has no column {name} in the mapping")
    return MAPPING[key][1](doc)


def own_result(activity: Doc | None, stored: Doc | None) -> Doc | None:
    """The activity's result as every reader must see it (docs/design.md, "Results",
    visibility rule): none before it ended; the outbox's first; a success's only once its
    claim was acknowledged."""
    if activity is not None and activity.get("status") not in TERMINAL:
        return None
    pending = ((activity or {}).get("outbox") or {}).get("result")
    if pending is not None:
        return {"_id": (activity or {}).get("_id"), **pending}
    if stored is None:
        return None
    lease = stored.get("lease_id")
    if activity is not None and lease is not None and (
            lease != activity.get("last_lease_id")
            or activity.get("last_outcome") != "completed"):
        return None
    return stored


@dataclass(frozen=True)
class Want:
    """A matcher of our scenario format, written as a YAML tag: `!null` (absent or null),
    `!set`, `!future`, `!past` (a time after or before now), `!id NAME` (the id a name
    stands for), `!token CLAIM` (a claim's token), `!checkpoint [NAME, kind, name]`."""

    kind: str
    arg: Any = None


class ScenarioLoader(yaml.SafeLoader):
    """YAML with our matcher tags (a plain mapping stays data: `{id: ch_1}` is a value)."""


for _tag in ("null", "set", "future", "past"):
    ScenarioLoader.add_constructor(f"!{_tag}", lambda loader, node, t=_tag: Want(t))
for _tag in ("id", "token"):
    ScenarioLoader.add_constructor(
        f"!{_tag}", lambda loader, node, t=_tag: Want(t, loader.construct_scalar(node)))
ScenarioLoader.add_constructor(
    "!checkpoint", lambda loader, node: Want("checkpoint", loader.construct_sequence(node)))


class Matcher:
    """Checks a value against what a scenario wants: a `Want`, or a plain value."""

    def __init__(self, ids: Callable[[str], uuid.UUID], tokens: Callable[[str], str],
                 checkpoint: Callable[[list[str]], uuid.UUID]) -> None:
        self.ids, self.tokens, self.checkpoint = ids, tokens, checkpoint

    def check(self, what: str, want: Any, got: Any, now: datetime | None = None) -> None:
        if isinstance(want, Want):
            if want.kind in ("null", "set", "future", "past"):
                self._is(what, want.kind, got, now or datetime.now(UTC))
                return
            want = {"id": self.ids, "token": self.tokens,
                    "checkpoint": self.checkpoint}[want.kind](want.arg)
        assert same(want, got), f"{what} = {shown(got)}, want {shown(want)}"

    @staticmethod
    def _is(what: str, kind: str, got: Any, now: datetime) -> None:
        if kind == "null":
            assert got is None, f"{what} = {shown(got)}, want null"
        elif kind == "set":
            assert got is not None, f"{what} is null"
        else:
            assert isinstance(got, datetime), f"{what} = {shown(got)}, want a time"
            assert (got > now) == (kind == "future"), f"{what} = {got}, want {kind} of {now}"


def same(want: Any, got: Any) -> bool:
    """JSON equality, a UUID equal to its text (the spec's ids are text)."""
    if isinstance(got, uuid.UUID) or isinstance(want, uuid.UUID):
        return str(want) == str(got)
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(same(v, got[k]) for k, v in want.items())
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(same(a, b) for a, b in zip(want, got, strict=True))
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got
    return bool(want == got)


def subset(want: dict[str, Any], got: Any) -> None:
    """Every key of `want` in `got` with an equal value, recursively."""
    assert isinstance(got, dict), f"{shown(got)} is not an object"
    for key, value in want.items():
        assert key in got, f"{shown(got)} lacks {key!r}"
        if isinstance(value, dict):
            subset(value, got[key])
        else:
            assert same(value, got[key]), f"{key} = {shown(got[key])}, want {shown(value)}"


def shown(value: Any) -> str:
    return "null" if value is None else repr(value)

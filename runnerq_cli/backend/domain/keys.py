"""Idempotency keys (docs/design.md, "Idempotency keys"): the rules, written once, and a
batch's decisions by them. `Enqueuer` (enqueueing.py) does the writes; `decide` says what
a spec does with a key, whether the key came from a batch's reads or a one-by-one look.
What enqueueing one spec did, `Outcome`, is outcomes.py's: an enqueue without a key
has one too, and need not load the rules of keys.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli import values
from runnerq_cli.backend.domain.models import OnDuplicate, Status
from runnerq_cli.backend.domain.outcomes import Outcome
from runnerq_cli.errors import DuplicateActivity, IdempotencyConflict

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.specs import ActivitySpec

# A key whose activity is not (yet) visible is only taken over after this long:
# younger, its enqueue may still be inserting the activity.
ORPHAN_KEY_GRACE = timedelta(seconds=60)


# A dry run's memory of the keys its earlier lines would take: digest -> (holder, status).
KeyPlan = dict[bytes, tuple[uuid.UUID | None, str]]


def key_digest(activity_type: str, key: str) -> bytes:
    """A short fixed-size name for a key (a dry run remembers keys, not their text)."""
    text = f"{activity_type}\x00{key}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()


def key_id(spec: ActivitySpec) -> dict[str, str]:
    assert spec.idempotency_key is not None
    return {"activity_type": spec.activity_type, "key": spec.idempotency_key}


def digest_of(spec: ActivitySpec) -> bytes:
    assert spec.idempotency_key is not None
    return key_digest(spec.activity_type, spec.idempotency_key)


def decide(spec: ActivitySpec, held: Mapping[str, Any] | None, holder_status: str | None,
           now: datetime, ttl: timedelta) -> str:
    """The idempotency rules (docs/design.md, "Idempotency keys"), in one place: what a
    spec does with its key, given the key's document (None: free) and its holder's
    status (None: the holder is not visible).

    "take": the key is free, past its TTL, or an orphan past ORPHAN_KEY_GRACE (a crash
    between the key and the activity): it goes to a new activity. Else the spec's
    `on_duplicate` decides against the holder: "existing", "duplicate" (no-reuse),
    "not_failed" (allow-reuse-on-failure and the holder has not failed) or "move"
    (the key moves to a new activity). A holder not visible yet counts as pending.
    """
    if held is None:
        return "take"
    created = held.get("created_at")
    if isinstance(created, datetime) and (
            created + ttl <= now
            or (holder_status is None and created + ORPHAN_KEY_GRACE <= now)):
        return "take"
    behaviour = spec.on_duplicate
    if behaviour is OnDuplicate.RETURN_EXISTING:
        return "existing"
    if behaviour is OnDuplicate.NO_REUSE:
        return "duplicate"
    if behaviour is OnDuplicate.ALLOW_REUSE_ON_FAILURE and (holder_status or Status.PENDING.value) \
            not in (Status.FAILED.value, Status.DEAD_LETTER.value):
        return "not_failed"
    return "move"


def held_outcome(spec: ActivitySpec, verdict: str, holder: uuid.UUID | None,
                 status: str) -> Outcome:
    """The outcome of a spec whose key is held and stays so (existing, duplicate,
    not_failed); the message quotes the key cut (values.shown), never whole."""
    who = str(holder) if holder is not None else "an earlier line"
    key = values.shown(spec.idempotency_key)
    if verdict == "existing":
        return Outcome("existing", holder, status)
    if verdict == "duplicate":
        return Outcome("duplicate", holder, status, DuplicateActivity(
            f"duplicate activity: idempotency key {key} is held by {who}", existing_id=holder))
    return Outcome("not_failed", holder, status, IdempotencyConflict(
        f"idempotency conflict: key {key} is held by {who}, which is {status}, not failed",
        existing_id=holder))


@dataclass(frozen=True)
class Known:
    """What a batch knows of its keys once it has tried to take them."""

    held: dict[bytes, dict[str, Any]]  # key documents found held, by digest
    status_of: dict[Any, str]  # their holders' statuses (absent: not visible)
    lost: list[bytes]  # keys this batch tried to take and another held
    firsts: dict[bytes, dict[str, Any]]  # the new activity of each key's first spec


def settle(specs: Sequence[ActivitySpec], groups: dict[bytes, list[int]], known: Known,
            now: datetime, ttl: timedelta, out: dict[int, Outcome],
            new_docs: dict[int, dict[str, Any]], plan: KeyPlan | None, *,
            dry_run: bool) -> list[int]:
    """Decide each keyed spec in order (`decide`), into `out` or `new_docs`; returns the
    specs that go one by one (a key that changes holder, and every later spec of it)."""
    sequential: list[int] = []
    for digest, indexes in groups.items():
        holder: tuple[uuid.UUID | None, str] | None = None
        doc = known.held.get(digest)
        if plan is not None and digest in plan:
            holder = plan[digest]
        elif doc is None and digest in known.lost:  # held, then gone (TTL): one by one
            sequential.extend(indexes)
            continue
        elif doc is not None:
            hid = doc.get("activity_id")
            status = known.status_of.get(hid)
            if decide(specs[indexes[0]], doc, status, now, ttl) != "take":
                holder = (hid, status or Status.PENDING.value)
            elif not dry_run:  # expired or orphaned: it moves
                sequential.extend(indexes)
                continue
        for position, index in enumerate(indexes):
            spec = specs[index]
            verdict = "take" if holder is None else decide(spec, {"created_at": now},
                                                           holder[1], now, ttl)
            if verdict in ("take", "move") and dry_run:
                holder = (None, first_status(spec, now))
                out[index] = Outcome("would_enqueue", None, holder[1])
            elif verdict == "take":  # free: this spec takes it (only a key's first)
                first = known.firsts[digest]
                holder = (first["_id"], first["status"])
                new_docs[index] = first
            elif verdict == "move":
                sequential.extend(indexes[position:])
                break
            else:
                assert holder is not None
                out[index] = held_outcome(spec, verdict, holder[0], holder[1])
        if plan is not None and holder is not None:
            plan[digest] = holder
    return sequential


def first_status(spec: ActivitySpec, now: datetime) -> str:
    return Status.SCHEDULED.value if spec.due_at(now) else Status.PENDING.value

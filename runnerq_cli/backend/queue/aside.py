"""Setting a malformed activity aside (docs/design.md, "Malformed documents").

Another program (the contract is public), a hand edit or an old bug can store an
activity without a required field or with a field of the wrong type. It must stop
only itself: the claim and the reaper dead-letter it, with an error naming the
field, instead of handing it to a handler, leaving it `processing` or failing a
whole pass on it. Readers skip it (shapes.py); `doctor` and `explain` name it.

Setting aside is the ordinary dead-lettering (attempt_writes.dead_letter_update: state,
`DeadLetter` event, Err result, dead-letter record) built from the fields of the
document that are usable. Two shapes of document refuse the ordinary update
itself, and are handled here too:

- a malformed outbox (shapes.outbox_problem): the outbox operators (`$inc`, `$push`)
  fail on one that is not a document or whose `seq` or `events` have another type,
  and a flush fails on an event without `_id`; so the set-aside writes the outbox
  whole instead of adding to it (what it held could not be copied anyway: repair
  skips it);
- a `claims` that is not a number: the claim's own `$inc` fails, on every claim,
  before any document is returned; the claim then finds that document and sets
  it aside from `pending`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, TypeVar

from pymongo import ReturnDocument

from runnerq_cli.backend.domain.documents import Activity, neutral
from runnerq_cli.backend.domain.models import MalformedDocument, Status
from runnerq_cli.backend.domain.partitions import term_of
from runnerq_cli.backend.domain.queries import Query
from runnerq_cli.backend.domain.shapes import ACTIVITY, outbox_problem
from runnerq_cli.backend.queue.attempt_writes import dead_letter_update
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import CommandFailed

log = logging.getLogger("runnerq.backend")
T = TypeVar("T")

MALFORMED = "malformed document"  # how the error of an activity set aside begins (shapes)
TYPE_MISMATCH = 14  # the server's code for `$inc` on a value that is not a number


def checked(doc: dict[str, Any]) -> tuple[Activity | None, str | None]:
    """(the activity of `doc`, None), or (None, what is wrong with it): the check of a
    writer that read `doc` whole, its outbox included when it came along (the write must
    be able to add to it)."""
    box = doc.get("outbox")
    try:
        activity = Activity.from_doc(doc if box is None else
                                     {k: v for k, v in doc.items() if k != "outbox"})
    except MalformedDocument as exc:
        return None, exc.problem
    problem = None if box is None else outbox_problem(doc)
    return (None, problem) if problem is not None else (activity, None)


def set_aside_update(doc: dict[str, Any], problem: str, now: datetime,
                     worker_id: str | None, lease_id: str | None) -> dict[str, Any]:
    """The update that dead-letters `doc`: `dead_letter_update` with the error
    `malformed document: <problem>`, from the fields of `doc` that are usable (the
    others as if absent)."""
    def usable(name: str, kind: type[T], default: T) -> T:
        value = doc.get(name)
        return value if type(value) is kind else default

    stand_in = Activity(  # only what dead_letter_update reads is taken from `doc`
        id=doc["_id"], activity_type=usable("activity_type", str, ""), payload={},
        priority=0, status=Status.DEAD_LETTER.value, created_at=now,
        retry_count=usable("retry_count", int, 0), started_at=usable("started_at", datetime,
                                                                     None),
        extra={"claims": usable("claims", int, 0)})
    return dead_letter_update(stand_in, f"{MALFORMED}: {problem}", now, worker_id, lease_id)


def with_whole_outbox(update: dict[str, Any], now: datetime) -> dict[str, Any]:
    """`update` with its outbox operators (writes.outbox_update) turned into one `$set` of
    the whole outbox: for a document whose outbox refuses them."""
    out = {op: dict(fields) for op, fields in update.items()}
    box: dict[str, Any] = {"seq": 1, "since": out.get("$min", {}).pop("outbox.since", now)}
    out.get("$inc", {}).pop("outbox.seq", None)
    box["events"] = out.get("$push", {}).pop("outbox.events", {}).get("$each", [])
    for name in ("result", "dead_letter"):
        if f"outbox.{name}" in out.get("$set", {}):
            box[name] = out["$set"].pop(f"outbox.{name}")
    out.setdefault("$set", {})["outbox"] = box
    return {op: fields for op, fields in out.items() if fields}


def set_aside(ctx: QueueContext, doc: dict[str, Any], problem: str, fence: dict[str, Any],
              worker_id: str | None, lease_id: str | None, where: str) -> bool:
    """Dead-letter the malformed `doc` where `fence` still matches it; True if done.
    `where` names the reader for the log ("claim", "reaper"). A document the server
    refuses to change even so is logged and left (False): its reader goes on."""
    now = ctx.clock()
    update = set_aside_update(doc, problem, now, worker_id, lease_id)
    if doc.get("outbox") is not None and outbox_problem(doc) is not None:
        update = with_whole_outbox(update, now)  # nothing of it could be copied out
    try:
        try:
            changed = ctx.activities.find_one_and_update(fence, update,
                                                         return_document=ReturnDocument.AFTER)
        except CommandFailed:  # its outbox refuses additions (see the module docstring)
            changed = ctx.activities.find_one_and_update(
                fence, with_whole_outbox(update, now), return_document=ReturnDocument.AFTER)
    except CommandFailed as exc:
        log.error(f"{where}: a malformed activity could not be set aside", extra={"fields": {
            "activity_id": str(doc["_id"]), "problem": problem, "error": str(exc)[:500]}})
        return False
    if changed is not None:
        log.warning(f"{where}: set aside a malformed activity", extra={"fields": {
            "activity_id": str(doc["_id"]), "problem": problem}})
        ctx.outbox.submit(changed)
    return changed is not None


def set_aside_unclaimable(ctx: QueueContext, claimable: Query, worker_id: str) -> bool:
    """After a claim failed on a type mismatch: set aside the first activity of the claim
    whose `claims` is not a number; False if there is none (the failure was another) or
    it changed meanwhile (the claim then fails as it would have, and is tried again)."""
    doc = ctx.activities.find_one(
        {**claimable.filter, "claims": {"$exists": True, "$not": {"$type": "number"}}},
        {"payload": 0}, sort=claimable.sort_list)
    if doc is None:
        return False
    problem = ACTIVITY.problem(doc) or f"claims is {neutral(doc['claims'])}, not an integer"
    return set_aside(ctx, doc, problem, {"_id": doc["_id"], **term_of(doc),
                                         "status": doc["status"], "claims": doc["claims"]},
                     worker_id, None, "claim")

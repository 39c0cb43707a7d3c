"""Pause and resume: operator controls stored in the database, so every worker on every host
obeys them and they outlive restarts.

One document in `runnerq_{queue}_control`:

    {_id: "pause", all: bool, types: [str], reason, actor, at,
     notes: [{type, reason, actor, at}]}

`all` pauses the whole queue; otherwise `types` lists the paused activity
types, and `notes` each one's own reason, actor and time (a document without
notes, from an older version, is read with the top-level ones for every type).
No document: nothing is paused. Workers read it at most once per poll interval
(worker/engine.py) and claim only what is not paused; they finish what they
already hold. Producers are not affected: `enqueue` still works.
Each change writes a `Paused`/`Resumed` event (activity_id null), which is
also its audit record (audit.py), before the control document changes; a
`resume` that finds nothing to resume writes nothing.

`pause` takes any type: pausing a type before its first activity is legitimate.
`resume` of a type that is not paused says so (scripts resume idempotently),
unless the queue has never seen that type (`seen_type`: no activity, no worker
claiming it, no pause of it in the audit trail): a misspelling is refused
(NotFound), nothing written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.event_types import EventType
from runnerq_cli.backend.domain.pause import PAUSE_ID as PAUSE_ID  # re-exported
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import InvalidArgument, NotFound

TYPE_MAX = 200
# The finished history can be long: a type is looked for in each index for at most this
# long; past it the type counts as seen (never refused on a guess).
SEEN_FINISHED_MS = 2000


def _check_types(types: Iterable[str] | None) -> list[str]:
    out: list[str] = []
    for value in types or ():
        text = str(value).strip()
        if not text or len(text) > TYPE_MAX or "\x00" in text:
            raise InvalidArgument(f"invalid activity type {value!r}")
        if text not in out:
            out.append(text)
    return out


class Control:
    """pause / resume / paused (mixed into `RunnerQ`)."""

    def __init__(self, ctx: QueueContext, audit: AuditLog) -> None:
        self._ctx = ctx
        self._audit = audit

    def paused(self) -> PauseState:
        """What is paused now (one indexed read by `_id`)."""
        return PauseState.from_doc(self._ctx.control.find_one({"_id": PAUSE_ID}))

    def pause(self, types: Iterable[str] | None = None, *, reason: str | None = None,
              actor: str | None = None, command: str | None = None) -> PauseState:
        """Pause the whole queue, or add `types` to the paused ones.

        The audit record (`Paused`) is written first, with the intent, and
        marked done after the control document changed (audit.AuditRun).
        """
        names = _check_types(types)
        run = self._audit.begin("pause", reason=reason, actor=actor,
                                event_type=EventType.PAUSED.value, types=names or "all",
                                command=command)
        with run:
            now = self._ctx.clock()
            note = {"reason": reason, "actor": run.doc["detail"]["actor"], "at": now}
            if not names:
                self._ctx.control.replace_one({"_id": PAUSE_ID},
                                              {"_id": PAUSE_ID, "all": True, "types": [],
                                               **note}, upsert=True)
            else:
                self._pause_types(names, note)
            state = self.paused()
            run.finish("done", paused=state.to_json()["types"] or "all")
        return state

    def _pause_types(self, names: list[str], note: dict[str, Any]) -> None:
        """Add `names` to the paused types, each with its own note (a re-paused type's
        note is replaced). Types of an older document (no notes) get the top-level note
        they were shown with, before that note becomes this pause's.

        Two writes: the old notes of `names` out, then the types and new notes in (one
        update cannot both pull and push `notes`); between them a reader sees those types
        with the top-level note, never a type unpaused.
        """
        before = self.paused()
        kept = [n for n in before.types if n not in names
                and all(item.type != n for item in before.notes)]
        if before.all:
            kept = []
        notes = [{"type": n, **note} for n in names]
        notes += [{"type": n, "reason": before.reason, "actor": before.actor, "at": before.at}
                  for n in kept]
        self._ctx.control.update_one({"_id": PAUSE_ID},
                                     {"$pull": {"notes": {"type": {"$in": names}}}})
        # While the whole queue is paused its reason, actor and time stay the top-level
        # ones (they say why nothing runs); the types are added with their own notes.
        top = {} if before.all else {"$set": note}
        self._ctx.control.update_one(
            {"_id": PAUSE_ID},
            {"$addToSet": {"types": {"$each": names}}, "$push": {"notes": {"$each": notes}},
             **top, "$setOnInsert": {"all": False}}, upsert=True)

    def resume(self, types: Iterable[str] | None = None, *, reason: str | None = None,
               actor: str | None = None, command: str | None = None) -> PauseState:
        """Resume everything, or only `types` (when those, not the whole queue, are paused).

        Nothing paused (or none of `types`): nothing is written, not even an
        audit record; the state is returned as it is. Of `types`, only those that were
        paused are resumed and recorded (a misspelt one is not in the audit).
        """
        from runnerq_cli.backend.domain.operator_text import check_text

        asked = _check_types(types)
        check_text(reason, "reason")
        check_text(actor, "actor")
        before = self.paused()
        if asked and before.all:
            raise InvalidArgument("the whole queue is paused: resume it (without types), "
                                  "then pause the types that must stay paused", "types")
        unknown = [n for n in asked if n not in before.types and not self.seen_type(n)]
        if unknown:
            raise NotFound(f"activity type {unknown[0]!r} is unknown on this queue (no "
                           "activity, worker or pause of it): nothing resumed")
        names = [n for n in asked if n in before.types]
        if not before.active or (asked and not names):
            return before
        run = self._audit.begin("resume", reason=reason, actor=actor,
                                event_type=EventType.RESUMED.value, types=names or "all",
                                command=command)
        with run:
            if not names:
                self._ctx.control.delete_one({"_id": PAUSE_ID})
            else:
                self._ctx.control.update_one({"_id": PAUSE_ID},
                                             {"$pull": {"types": {"$in": names},
                                                        "notes": {"type": {"$in": names}}}})
                self._ctx.control.delete_one({"_id": PAUSE_ID, "all": False, "types": []})
            state = self.paused()
            run.finish("done", still_paused=list(state.types) or None)
        return state

    def seen_type(self, activity_type: str) -> bool:
        """Whether the queue knows `activity_type`: a worker registered for it, a pause
        of it in the audit trail (kept as long as events), or an activity of it in any
        state.

        Cheapest first, each an indexed read that stops at the first match: the worker
        registry (a few documents), the queue's own records (the events of no activity:
        pauses, resumes, operator actions), pending work (a seek on the claim-by-type
        index), then the running, scheduled and finished index keys (covered: no
        document is read; each for at most SEEN_FINISHED_MS). Only a type found nowhere
        reads them all.
        """
        from runnerq_cli.errors import CommandFailed, CommandTimedOut

        if self._ctx.workers.find_one({"types": activity_type}, {"_id": 1}) is not None:
            return True
        from runnerq_cli.backend.store.hints import count_fallback, refused_hint

        settings = self._ctx.settings
        for query in queries.type_presence(activity_type):
            collection = self._ctx.events if query.role == "events" else self._ctx.activities
            index = str(query.index(settings))
            try:
                found = collection.find_one(query.filter, {"_id": 1}, hint=index,
                                            max_time_ms=SEEN_FINISHED_MS)
            except CommandTimedOut:  # too long: unsure
                return True
            except CommandFailed as exc:  # no index: unsure (a refused hint is counted)
                if refused_hint(exc):
                    count_fallback(index, exc, collection.name)
                return True
            if found is not None:
                return True
        return False

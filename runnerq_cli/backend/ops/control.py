"""Pause and resume: operator controls stored in the database, so every worker on every host
obeys them and they outlive restarts.

One document in `runnerq_{queue}_control`:

    {_id: "pause", all: bool, types: [str], reason, actor, at}

`all` pauses the whole queue; otherwise `types` lists the paused activity
types. No document: nothing is paused. Workers read it at most once per poll
interval (worker/engine.py) and claim only what is not paused; they finish
what they already hold. Producers are not affected: `enqueue` still works.
Each change writes a `Paused`/`Resumed` event (activity_id null), which is
also its audit record (audit.py), before the control document changes; a
`resume` that finds nothing to resume writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from runnerq_cli.backend.domain.models import EventType
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.errors import InvalidArgument

PAUSE_ID = "pause"
TYPE_MAX = 200


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
                self._ctx.control.update_one(
                    {"_id": PAUSE_ID},
                    {"$addToSet": {"types": {"$each": names}}, "$set": note,
                     "$setOnInsert": {"all": False}}, upsert=True)
            state = self.paused()
            run.finish("done", paused=state.to_json()["types"] or "all")
        return state

    def resume(self, types: Iterable[str] | None = None, *, reason: str | None = None,
               actor: str | None = None, command: str | None = None) -> PauseState:
        """Resume everything, or only `types` (when those, not the whole queue, are paused).

        Nothing paused (or none of `types`): nothing is written, not even an
        audit record; the state is returned as it is. Of `types`, only those that were
        paused are resumed and recorded (a misspelt one is not in the audit).
        """
        from runnerq_cli.backend.ops.audit import check_text

        asked = _check_types(types)
        check_text(reason, "reason")
        check_text(actor, "actor")
        before = self.paused()
        if asked and before.all:
            raise InvalidArgument("the whole queue is paused: resume it (without types), "
                                  "then pause the types that must stay paused", "types")
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
                                             {"$pull": {"types": {"$in": names}}})
                self._ctx.control.delete_one({"_id": PAUSE_ID, "all": False, "types": []})
            state = self.paused()
            run.finish("done", still_paused=list(state.types) or None)
        return state

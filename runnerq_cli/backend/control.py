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

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_cli.backend.audit import AuditLog
from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.models import EventType, display_time, to_jsonable
from runnerq_cli.errors import InvalidArgument

PAUSE_ID = "pause"
TYPE_MAX = 200


@dataclass(frozen=True)
class PauseState:
    """What is paused now (`active` is False when nothing is)."""

    all: bool = False
    types: tuple[str, ...] = ()
    reason: str | None = None
    actor: str | None = None
    at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.all or bool(self.types)

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None) -> PauseState:
        from runnerq_cli.backend.shapes import PAUSE

        if not doc or PAUSE.problem(doc) is not None:  # malformed: doctor names it
            return cls()
        return cls(all=doc.get("all") is True, types=tuple(sorted(doc.get("types") or ())),
                   reason=doc.get("reason"), actor=doc.get("actor"), at=doc.get("at"))

    def covers(self, worker_types: Iterable[str]) -> bool:
        """True when a worker claiming `worker_types` ([] = every type) may claim nothing."""
        types = list(worker_types)
        if self.all:
            return True
        return bool(types) and all(t in self.types for t in types)

    def claim_scope(self, worker_types: Iterable[str]) -> tuple[list[str] | None, list[str]] | None:
        """(types to claim or None for any, types to exclude), or None to claim nothing."""
        types = list(worker_types)
        if self.covers(types):
            return None
        if types:
            return [t for t in types if t not in self.types], []
        return None, list(self.types)

    def describe(self, *, shown: Callable[[str, int | None], str] = lambda text, _limit: text,
                 when: Callable[[datetime], str] = display_time) -> str:
        """One line for people: what is paused, since when, by whom, why.

        `shown(value, max_length)` renders each recorded value and `when` the time: the
        CLI passes its escaping and its time format; the worker's log and doctor take
        them as they are (their output is escaped where it is printed).
        """
        if not self.active:
            return "not paused"
        what = "the whole queue" if self.all else "types " + ", ".join(
            shown(t, None) for t in self.types)
        text = f"paused: {what}"
        if self.at is not None:
            text += f" since {when(self.at)}"
        if self.actor:
            text += f" by {shown(self.actor, 200)}"
        if self.reason:
            text += f" ({shown(self.reason, 500)})"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"paused": self.active, "all": self.all, "types": list(self.types),
                "reason": self.reason, "actor": self.actor, "at": to_jsonable(self.at)}


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
        from runnerq_cli.backend.audit import check_text

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


class PauseWatch:
    """The pause state as a worker sees it: read at most once per `every` seconds.

    A claim never uses a state older than `every` (the poll interval), so
    workers stop claiming paused types within one poll interval. A failed
    read keeps the last state known (the claim itself will report the outage).
    """

    def __init__(self, read: Callable[[], PauseState], every: float) -> None:
        self._read = read
        self._every = every
        self._state = PauseState()
        self._read_at: float | None = None

    def current(self) -> tuple[PauseState, bool]:
        """(the state, whether it changed at this read)."""
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < self._every:
            return self._state, False
        try:
            state = self._read()
        except Exception:
            return self._state, False
        self._read_at = now
        changed = (state.all, state.types) != (self._state.all, self._state.types)
        self._state = state
        return state, changed

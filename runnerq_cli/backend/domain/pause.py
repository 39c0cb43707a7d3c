"""What is paused (`PauseState`), and a worker's view of it read at most once a poll.

Pure: the state is parsed from the control document (control.py reads and writes
it); the worker, the doctor and the CLI read the state without the part that
writes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.models import display_time, to_jsonable

PAUSE_ID = "pause"  # the control document of the pause (docs/design.md, "Control")


@dataclass(frozen=True)
class TypePause:
    """Why one type is paused: its own reason, who paused it and since when (each type's
    pause keeps its own: pausing a second type must not rewrite the first's)."""

    type: str
    reason: str | None = None
    actor: str | None = None
    at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "actor": self.actor, "at": to_jsonable(self.at)}


@dataclass(frozen=True)
class PauseState:
    """What is paused now (`active` is False when nothing is).

    `reason`, `actor` and `at` are the whole queue's pause, or else the latest pause of a
    type; `notes` holds each paused type's own (a document written before per-type notes
    has none: its types take the top-level values, `note`).
    """

    all: bool = False
    types: tuple[str, ...] = ()
    reason: str | None = None
    actor: str | None = None
    at: datetime | None = None
    notes: tuple[TypePause, ...] = ()

    @property
    def active(self) -> bool:
        return self.all or bool(self.types)

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None) -> PauseState:
        from runnerq_cli.backend.domain.shapes import PAUSE

        if not doc or PAUSE.problem(doc) is not None:  # malformed: doctor names it
            return cls()
        types = tuple(sorted(doc.get("types") or ()))
        notes = {}
        for item in doc.get("notes") or ():
            name = item.get("type")
            if name in types and _note_problem(item) is None:
                notes[name] = TypePause(name, item.get("reason"), item.get("actor"),
                                        item.get("at"))
        return cls(all=doc.get("all") is True, types=types, reason=doc.get("reason"),
                   actor=doc.get("actor"), at=doc.get("at"),
                   notes=tuple(notes[t] for t in types if t in notes))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PauseState:
        """The state back from `to_json` (a snapshot, an explanation's fact)."""
        def when(value: Any) -> datetime | None:
            try:
                return datetime.fromisoformat(value) if isinstance(value, str) else None
            except ValueError:
                return None

        by_type = data.get("by_type")
        if not isinstance(by_type, dict):
            by_type = {}
        types = tuple(str(t) for t in data.get("types") or [])
        return cls(all=data.get("all") is True, types=types, reason=data.get("reason"),
                   actor=data.get("actor"), at=when(data.get("at")),
                   notes=tuple(TypePause(t, n.get("reason"), n.get("actor"), when(n.get("at")))
                               for t, n in by_type.items()
                               if t in types and isinstance(n, dict)))

    def note(self, activity_type: str) -> TypePause:
        """`activity_type`'s pause: its own note, or (an older document) the top-level one."""
        for item in self.notes:
            if item.type == activity_type:
                return item
        return TypePause(activity_type, self.reason, self.actor, self.at)

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
        """One line for people: what is paused, since when, by whom, why; types paused
        apart, each with its own ("types a since .. (why); b since .. (why)").

        `shown(value, max_length)` renders each recorded value and `when` the time: the
        CLI passes its escaping and its time format; the worker's log and doctor take
        them as they are (their output is escaped where it is printed).
        """
        if not self.active:
            return "not paused"

        def told(reason: str | None, actor: str | None, at: datetime | None) -> str:
            text = f" since {when(at)}" if at is not None else ""
            text += f" by {shown(actor, 200)}" if actor else ""
            return text + (f" ({shown(reason, 500)})" if reason else "")

        if self.all:
            return "paused: the whole queue" + told(self.reason, self.actor, self.at)
        groups: dict[tuple[Any, ...], list[str]] = {}  # types paused together, together
        for name in self.types:
            note = self.note(name)
            groups.setdefault((note.reason, note.actor, note.at), []).append(shown(name, None))
        return "paused: types " + "; ".join(", ".join(names) + told(*key)
                                            for key, names in groups.items())

    def to_json(self) -> dict[str, Any]:
        return {"paused": self.active, "all": self.all, "types": list(self.types),
                "reason": self.reason, "actor": self.actor, "at": to_jsonable(self.at),
                "by_type": {t: self.note(t).to_json() for t in self.types}}


def _note_problem(item: Any) -> str | None:
    """What is wrong with one per-type note (a hand edit), or None; a bad one is ignored
    (the type then shows the top-level reason)."""
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        return "no type"
    for key, kind in (("reason", str), ("actor", str), ("at", datetime)):
        if item.get(key) is not None and not isinstance(item[key], kind):
            return f"{key} is not a {kind.__name__}"
    return None


class PauseWatch:
    """The pause state as a worker sees it: read at most once per `every` seconds.

    A claim never uses a state older than `every` (the poll interval), so
    workers stop claiming paused types within one poll interval. A failed
    read keeps the last state known (the claim itself will report the outage).
    """

    def __init__(self, read: Callable[[], PauseState], every: float) -> None:
        self._read = read
        # Seconds a state read is used for; a worker whose change stream on the control
        # document is open sets it longer (a change calls `expire`).
        self.every = every
        self._state = PauseState()
        self._read_at: float | None = None
        # Counts `expire` calls: one that lands during a read (another thread, the
        # stream's) must not be overwritten by that read's time.
        self._expiries = 0

    def expire(self) -> None:
        """The state may have changed (the server said so): read it at the next call,
        even when a read is under way now (it may have been answered before the change)."""
        self._expiries += 1
        self._read_at = None

    @property
    def fresh(self) -> bool:
        """Whether the state was read and nothing said since that it changed: False after
        a read that failed (the state kept is the last known, which a resume reported in
        the meantime may have ended), so the worker polls instead of waiting for a stream
        that already told it."""
        return self._read_at is not None

    def current(self) -> tuple[PauseState, bool]:
        """(the state, whether it changed at this read)."""
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < self.every:
            return self._state, False
        expiries = self._expiries
        try:
            state = self._read()
        except Exception:
            return self._state, False
        self._read_at = now if self._expiries == expiries else None
        changed = (state.all, state.types) != (self._state.all, self._state.types)
        self._state = state
        return state, changed

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
        from runnerq_cli.backend.domain.shapes import PAUSE

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

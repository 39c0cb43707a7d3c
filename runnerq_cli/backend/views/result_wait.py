"""Waiting for an activity to finish, as arq's `Job.result(timeout)` and dramatiq's
`get_result(block=...)` do: one indexed read by `_id` per poll, backing off.

The outcome says what happened (terminal status, result, timed out); the CLI
turns it into an exit code (cli/wait_report.py). NotFound when there is no such
activity and no result.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from runnerq_cli.backend.domain.documents import Activity, Result
from runnerq_cli.backend.domain.models import parse_activity_id
from runnerq_cli.backend.domain.outage import OutageWatch
from runnerq_cli.errors import NotFound

R = TypeVar("R")


class _GaveUp(Exception):
    """The wait's deadline (or a stop) passed while the server was away."""


@dataclass(frozen=True)
class WaitOutcome:
    activity_id: str
    status: str | None  # None: timed out before it was terminal (status then is `last_status`)
    last_status: str | None  # None: aged out by retention, known from its result alone
    result: Result | None
    last_error: str | None
    timed_out: bool
    waited_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"activity_id": self.activity_id, "status": self.last_status,
                "terminal": self.status is not None, "timed_out": self.timed_out,
                "result": self.result.to_json() if self.result else None,
                "last_error": self.last_error,
                "waited_seconds": round(self.waited_seconds, 3)}


class Waiting:
    """One wait's rules, apart from how it sleeps: `look()` reads the activity once and
    answers the outcome, or how long to sleep before the next look.

    `wait_for` drives it with `time.sleep`; the asyncio API (runnerq_cli/aio) with
    `asyncio.sleep`, its reads on its thread pool: one implementation of what a wait
    decides, whichever way it waits. With `outage` (domain/outage.py), a server that goes
    away once the wait has begun is waited for within the timeout (a look then takes as
    long as the server is away, shown through the watch's callbacks); past the timeout
    the outcome is a timeout that reports the last state read.
    """

    def __init__(self, get_activity: Callable[[uuid.UUID], Activity],
                 get_result: Callable[[uuid.UUID], Result | None],
                 activity_id: uuid.UUID | str, timeout: float | None, poll: float = 0.25,
                 max_poll: float = 2.0, outage: OutageWatch | None = None) -> None:
        self._get_activity = get_activity
        self._get_result = get_result
        self.activity_id = parse_activity_id(activity_id)
        self._timeout = timeout
        self._max_poll = max_poll
        self._delay = poll
        self._outage = outage
        self._started = time.monotonic()
        self._deadline = None if timeout is None else self._started + timeout
        self._last: Activity | None = None  # what a timeout while away reports

    def _read(self, fn: Callable[[uuid.UUID], R]) -> R:
        if self._outage is None:
            return fn(self.activity_id)
        boxed = self._outage.call(lambda: (fn(self.activity_id),), until=self._deadline)
        if boxed is None:
            raise _GaveUp
        return boxed[0]

    def look(self) -> WaitOutcome | float:
        """Read once: the outcome, or the seconds to sleep before looking again.

        Raises NotFound if the activity does not exist (and has left no result).
        """
        try:
            return self._look()
        except _GaveUp:  # the deadline passed (or the watch was stopped) while away
            gone = self._last
            return WaitOutcome(str(self.activity_id), None,
                               gone.display_status if gone else None, None,
                               gone.last_error if gone else None, True,
                               time.monotonic() - self._started)

    def _look(self) -> WaitOutcome | float:
        aid = self.activity_id
        try:
            act = self._read(self._get_activity)
        except NotFound:
            result = self._read(self._get_result)
            if result is None:
                raise
            # Aged out by retention, its result is still here: report that.
            return WaitOutcome(str(aid), "completed" if result.state == "Ok" else "failed",
                               None, result, None, False, time.monotonic() - self._started)
        self._last = act
        if act.is_terminal:
            result = self._read(self._get_result)
            return WaitOutcome(str(aid), act.status, act.status, result, act.last_error, False,
                               time.monotonic() - self._started)
        elapsed = time.monotonic() - self._started
        timeout = self._timeout
        if timeout is not None and elapsed >= timeout:
            return WaitOutcome(str(aid), None, act.display_status, None, act.last_error, True,
                               elapsed)
        sleep = self._delay if timeout is None else min(self._delay, max(0.0, timeout - elapsed))
        self._delay = min(self._max_poll, self._delay * 1.5)
        return float(sleep)


def wait_for(get_activity: Callable[[uuid.UUID], Activity],
             get_result: Callable[[uuid.UUID], Result | None], activity_id: uuid.UUID | str,
             timeout: float | None, poll: float = 0.25, max_poll: float = 2.0,
             outage: OutageWatch | None = None) -> WaitOutcome:
    """Poll the activity (one indexed find by `_id`) until it is terminal or `timeout` passes.

    Raises NotFound if the activity does not exist (and has left no result). With
    `outage`, a server that goes away after the first read is waited for (domain/outage.py:
    shown through the watch's callbacks) within `timeout`; without it, or at the first
    read, Unavailable is raised.
    """
    waiting = Waiting(get_activity, get_result, activity_id, timeout, poll, max_poll, outage)
    while True:
        step = waiting.look()
        if isinstance(step, WaitOutcome):
            return step
        time.sleep(step)

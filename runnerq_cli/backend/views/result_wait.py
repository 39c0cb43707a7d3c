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

from runnerq_cli.backend.domain.models import Activity, Result, parse_activity_id
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
    aid = parse_activity_id(activity_id)
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    last: list[Activity] = []  # the last activity read (what a timeout reports)

    def read(fn: Callable[[uuid.UUID], R]) -> R:
        if outage is None:
            return fn(aid)
        boxed = outage.call(lambda: (fn(aid),), until=deadline)
        if boxed is None:
            raise _GaveUp
        return boxed[0]

    try:
        delay = poll
        while True:
            try:
                act: Activity = read(get_activity)
            except NotFound:
                result: Result | None = read(get_result)
                if result is None:
                    raise
                # Aged out by retention, its result is still here: report that.
                return WaitOutcome(str(aid), "completed" if result.state == "Ok" else "failed",
                                   None, result, None, False, time.monotonic() - started)
            last[:] = [act]
            if act.is_terminal:
                result = read(get_result)
                return WaitOutcome(str(aid), act.status, act.status, result, act.last_error,
                                   False, time.monotonic() - started)
            elapsed = time.monotonic() - started
            if timeout is not None and elapsed >= timeout:
                return WaitOutcome(str(aid), None, act.display_status, None, act.last_error,
                                   True, elapsed)
            sleep = delay if timeout is None else min(delay, max(0.0, timeout - elapsed))
            time.sleep(sleep)
            delay = min(max_poll, delay * 1.5)
    except _GaveUp:  # the deadline passed (or the watch was stopped) while away
        gone = last[-1] if last else None
        return WaitOutcome(str(aid), None, gone.display_status if gone else None, None,
                           gone.last_error if gone else None, True, time.monotonic() - started)

"""Waiting for an activity to finish, as arq's `Job.result(timeout)` and dramatiq's
`get_result(block=...)` do: one indexed read by `_id` per poll, backing off.

The outcome carries the exit code the CLI gives it (errors.ExitCode): 0
completed; ACTIVITY_FAILED (10); ACTIVITY_DEAD_LETTERED (11); ACTIVITY_CANCELLED
(12); WAIT_TIMEOUT (13) not terminal in time. NotFound (4) when there is no such
activity and no result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runnerq_cli.errors import ExitCode

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.models import Activity, Result

STATUS_CODES = {
    "completed": ExitCode.OK,
    "failed": ExitCode.ACTIVITY_FAILED,
    "dead_letter": ExitCode.ACTIVITY_DEAD_LETTERED,
    "cancelled": ExitCode.ACTIVITY_CANCELLED,
}
RESULT_ERR_CODES = {"non_retryable": ExitCode.ACTIVITY_FAILED,
                    "dead_letter": ExitCode.ACTIVITY_DEAD_LETTERED}


@dataclass(frozen=True)
class WaitOutcome:
    activity_id: str
    status: str | None  # None: timed out before it was terminal (status then is `last_status`)
    last_status: str | None
    result: Result | None
    last_error: str | None
    code: ExitCode
    waited_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"activity_id": self.activity_id, "status": self.last_status,
                "terminal": self.status is not None,
                "timed_out": self.code is ExitCode.WAIT_TIMEOUT,
                "result": self.result.to_json() if self.result else None,
                "last_error": self.last_error, "exit_code": int(self.code),
                "waited_seconds": round(self.waited_seconds, 3)}


def code_for_result(result: Result) -> ExitCode:
    if result.state == "Ok":
        return ExitCode.OK
    kind = (result.data or {}).get("type") if isinstance(result.data, dict) else None
    return RESULT_ERR_CODES.get(kind, ExitCode.ACTIVITY_FAILED)


def wait_for(backend: RunnerQ, activity_id: Any, timeout: float | None,
             poll: float = 0.25, max_poll: float = 2.0) -> WaitOutcome:
    """Poll the activity (one indexed find by `_id`) until it is terminal or `timeout` passes.

    Raises NotFound if the activity does not exist (and has left no result).
    """
    from runnerq_cli.backend.models import parse_activity_id
    from runnerq_cli.errors import NotFound

    aid = parse_activity_id(activity_id)
    started = time.monotonic()
    delay = poll
    while True:
        try:
            act: Activity | None = backend.get_activity(aid)
        except NotFound:
            act = None
            result = backend.get_result(aid)
            if result is None:
                raise
            # Aged out by retention, its result is still here: report that.
            return WaitOutcome(str(aid), "completed" if result.state == "Ok" else "failed",
                               None, result, None, code_for_result(result),
                               time.monotonic() - started)
        if act.is_terminal:
            result = backend.get_result(aid)
            code = STATUS_CODES.get(act.status, ExitCode.FAILURE)
            return WaitOutcome(str(aid), act.status, act.status, result, act.last_error, code,
                               time.monotonic() - started)
        elapsed = time.monotonic() - started
        if timeout is not None and elapsed >= timeout:
            return WaitOutcome(str(aid), None, act.display_status, None, act.last_error,
                               ExitCode.WAIT_TIMEOUT, elapsed)
        sleep = delay if timeout is None else min(delay, max(0.0, timeout - elapsed))
        time.sleep(sleep)
        delay = min(max_poll, delay * 1.5)

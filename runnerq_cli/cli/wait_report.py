"""Report a waited-for activity: shared by `wait ID` and `enqueue --wait` (the waiting
itself is the backend's: `RunnerQ.wait`, backend/views/result_wait.py).

The exit codes are the CLI's (cli/exits.ExitCode): 0 completed; ACTIVITY_FAILED (10);
ACTIVITY_DEAD_LETTERED (11); ACTIVITY_CANCELLED (12); WAIT_TIMEOUT (13) not
terminal in time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runnerq_cli.cli.exits import ExitCode

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.documents import Result
    from runnerq_cli.backend.views.result_wait import WaitOutcome
    from runnerq_cli.cli.output import OutputFormat

STATUS_CODES = {
    "completed": ExitCode.OK,
    "failed": ExitCode.ACTIVITY_FAILED,
    "dead_letter": ExitCode.ACTIVITY_DEAD_LETTERED,
    "cancelled": ExitCode.ACTIVITY_CANCELLED,
}
RESULT_ERR_CODES = {"non_retryable": ExitCode.ACTIVITY_FAILED,
                    "dead_letter": ExitCode.ACTIVITY_DEAD_LETTERED,
                    "cancelled": ExitCode.ACTIVITY_CANCELLED}


def code_for_result(result: Result) -> ExitCode:
    """The exit code a stored result stands for (its Err's type says how it ended)."""
    if result.state == "Ok":
        return ExitCode.OK
    kind = result.data.get("type") if isinstance(result.data, dict) else None
    return RESULT_ERR_CODES.get(kind, ExitCode.ACTIVITY_FAILED) if isinstance(kind, str) \
        else ExitCode.ACTIVITY_FAILED


def exit_code(outcome: WaitOutcome) -> ExitCode:
    """The exit code of a wait: how the activity ended, or that it did not in time."""
    if outcome.timed_out:
        return ExitCode.WAIT_TIMEOUT
    if outcome.last_status is None and outcome.result is not None:
        return code_for_result(outcome.result)  # aged out: its result says how it ended
    return STATUS_CODES.get(outcome.status or "", ExitCode.FAILURE)


def with_id(doc: dict[str, Any]) -> dict[str, Any]:
    """`id` first, as `enqueue`, `list` and `show` name an activity's id; `activity_id`
    stays beside it for scripts written before (docs/reference.md, "Ids in JSON")."""
    return {"id": doc.get("activity_id"), **doc}


def outcome_json(outcome: WaitOutcome) -> dict[str, Any]:
    """The outcome as JSON, with the exit code the command ends with; the result's
    `state` and `data` also at the top, where `result -o json` has them (`.data.X`)."""
    doc = outcome.to_json()
    waited = doc.pop("waited_seconds")
    result = doc.get("result") or {}
    return {**with_id(doc), "state": result.get("state"), "data": result.get("data"),
            "exit_code": int(exit_code(outcome)), "waited_seconds": waited}


def report(outcome: WaitOutcome, fmt: OutputFormat, extra: dict[str, Any] | None = None) -> int:
    """Print the outcome (result on stdout, a one-line reason on stderr); return the exit code.

    `extra` fields join the JSON document (`enqueue --wait` adds `created`), so
    machine output stays one document.
    """
    import json
    import sys

    from runnerq_cli.backend.domain.models import to_jsonable
    from runnerq_cli.cli.output import OutputFormat, emit, error_line

    code = exit_code(outcome)
    if fmt is not OutputFormat.TEXT:
        emit(fmt, {**outcome_json(outcome), **(extra or {})})
    elif outcome.result is not None:
        data = to_jsonable(outcome.result.data)
        from runnerq_cli.literal import literal

        # A text result keeps its lines; every other control is escaped (-o json: exact).
        text = json.dumps(data, indent=2) if not isinstance(data, str) else literal(
            data, multiline=True)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    if code is ExitCode.WAIT_TIMEOUT:
        error_line(f"activity {outcome.activity_id} is still {outcome.last_status} after "
                   f"{outcome.waited_seconds:.1f}s")
    elif code is not ExitCode.OK:
        reason = f": {outcome.last_error}" if outcome.last_error else ""
        error_line(f"activity {outcome.activity_id} ended {outcome.status}{reason}")
    return int(code)

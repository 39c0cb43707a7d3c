"""Report a waited-for activity: shared by `wait ID` and `enqueue --wait` (the waiting
itself is the backend's: `RunnerQ.wait`, backend/waiting.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runnerq_cli.errors import ExitCode

if TYPE_CHECKING:
    from runnerq_cli.backend.waiting import WaitOutcome
    from runnerq_cli.cli.output import OutputFormat


def report(outcome: WaitOutcome, fmt: OutputFormat, extra: dict[str, Any] | None = None) -> int:
    """Print the outcome (result on stdout, a one-line reason on stderr); return the exit code.

    `extra` fields join the JSON document (`enqueue --wait` adds `created`), so
    machine output stays one document.
    """
    import json
    import sys

    from runnerq_cli.backend.models import to_jsonable
    from runnerq_cli.cli.output import OutputFormat, emit, error_line

    if fmt is not OutputFormat.TEXT:
        emit(fmt, {**outcome.to_json(), **(extra or {})})
    elif outcome.result is not None:
        data = to_jsonable(outcome.result.data)
        from runnerq_cli.literal import literal

        # A text result keeps its lines; every other control is escaped (-o json: exact).
        text = json.dumps(data, indent=2) if not isinstance(data, str) else literal(
            data, multiline=True)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    if outcome.code is ExitCode.WAIT_TIMEOUT:
        error_line(f"activity {outcome.activity_id} is still {outcome.last_status} after "
                   f"{outcome.waited_seconds:.1f}s")
    elif outcome.code is not ExitCode.OK:
        reason = f": {outcome.last_error}" if outcome.last_error else ""
        error_line(f"activity {outcome.activity_id} ended {outcome.status}{reason}")
    return int(outcome.code)

"""The command line's reading of the API's outcomes: exit codes and flag names.

The backend and the worker know nothing of the terminal: their errors are kinds
(errors.py) whose messages name the API's parameters (`max_count must be at least
1`), a worker's run ends with a `WorkerEnd`. Here, once, the CLI maps each kind to
its documented exit code (docs/reference.md, "Exit codes") and each parameter to the
flag a user typed (`--max must be at least 1`).

Kept free of heavy imports: every run imports it, shell completion included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from runnerq_cli import errors

if TYPE_CHECKING:
    from runnerq_cli.worker.engine import WorkerEnd


class ExitCode(IntEnum):
    """Documented exit codes of `runnerq-mongo` (docs/reference.md: "Exit codes")."""

    OK = 0
    FAILURE = 1  # an unexpected error; a bug report is welcome
    USAGE = 2  # bad flags, malformed JSON/YAML input, invalid values, not confirmed
    CONFIG = 3  # the configuration file or environment is invalid
    NOT_FOUND = 4  # no such activity / result
    CONFLICT = 5  # duplicate activity, idempotency conflict, a schedule's name taken
    UNAVAILABLE = 6  # the MongoDB server cannot be reached
    CHECK_FAILED = 7  # a --check did not hold (init-indexes, stats)
    CLAIM_LOST = 8  # a stale claim was used (API users; the worker handles it)
    WRONG_STATE = 9  # an operator action does not apply to the activity's current status
    ACTIVITY_FAILED = 10  # wait/result: the activity failed (non-retryable)
    ACTIVITY_DEAD_LETTERED = 11  # wait/result: the activity was dead-lettered
    ACTIVITY_CANCELLED = 12  # wait/result: an operator cancelled the activity
    WAIT_TIMEOUT = 13  # wait: the activity was not terminal in time
    NO_RESULT = 14  # result: the activity has no result (yet)
    ADDRESS_IN_USE = 15  # metrics serve: the host/port to listen on is taken
    CHECKPOINT_CONFLICT = 16  # a claim's success repeated with a different result (API users)
    WORKER_ERRORS = 20  # worker --burst --fail-on-error: some activity failed
    WORKER_SHUTDOWN_TIMEOUT = 21  # worker: running work was released at shutdown
    INTERRUPTED = 130  # a second signal stopped the process at once


# Each kind of error, its exit code; a subclass takes its nearest listed base's.
EXIT_CODES: dict[type[BaseException], ExitCode] = {
    errors.InvalidArgument: ExitCode.USAGE,
    errors.ConfigError: ExitCode.CONFIG,
    errors.NotFound: ExitCode.NOT_FOUND,
    errors.DuplicateActivity: ExitCode.CONFLICT,
    errors.AlreadyExists: ExitCode.CONFLICT,
    errors.IdempotencyConflict: ExitCode.CONFLICT,
    errors.Unavailable: ExitCode.UNAVAILABLE,
    errors.WriteUnconfirmed: ExitCode.UNAVAILABLE,  # may be repeated, as after an outage
    errors.WriteRefused: ExitCode.USAGE,  # what was sent is refused: sending it again fails
    errors.DuplicateKey: ExitCode.CONFLICT,
    errors.ClaimLost: ExitCode.CLAIM_LOST,
    errors.WrongState: ExitCode.WRONG_STATE,
    errors.AddressInUse: ExitCode.ADDRESS_IN_USE,
    errors.CheckpointConflict: ExitCode.CHECKPOINT_CONFLICT,
    errors.CommandFailed: ExitCode.FAILURE,  # the server's own error (store/driver.py)
}

# Each API parameter an error may name, as the flag that sets it.
FLAGS: dict[str, str] = {
    "max_count": "--max",
    "since": "--since",
    "until": "--until",
    "error_contains": "--error-contains",
    "worker": "--worker",
    "after": "--after",
    "limit": "--limit",
    "on_duplicate": "--on-duplicate",
    "types": "--type",
    "mode": "--mode",
    "redrive": "--redrive",
    "create": "--create",
}
# The worker's parameters, as `worker`'s flags (its `types` is `--types`).
WORKER_FLAGS: dict[str, str] = {
    **FLAGS,
    "types": "--types (worker.types)",
    "all_types": "--all-types",
    "max_activities": "--max-activities",
    "handlers": "--handler",
    "commands": "--exec",
    "app": "--app (or worker.handlers / worker.exec / worker.app in the config)",
}


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit code of an error: its kind's, else FAILURE (1: a bug report is welcome)."""
    for kind in type(exc).__mro__:
        if kind in EXIT_CODES:
            return EXIT_CODES[kind]
    return ExitCode.FAILURE


def common_exit_code(exceptions: Iterable[BaseException]) -> ExitCode:
    """OK when there are none; the one exit code they share; else FAILURE."""
    codes = {exit_code_of(exc) for exc in exceptions}
    if not codes:
        return ExitCode.OK
    return codes.pop() if len(codes) == 1 else ExitCode.FAILURE


def message_of(exc: BaseException, flags: Mapping[str, str] = FLAGS) -> str:
    """The error's one line, each parameter it names (`parameters`) written as its flag."""
    text = str(exc)
    for name in getattr(exc, "parameters", ()):
        if name in flags:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", flags[name], text)
    return text


def flagged(exc: errors.InvalidArgument,
            flags: Mapping[str, str] = FLAGS) -> errors.InvalidArgument:
    """The same error, its message in flags (for a command whose flags differ)."""
    return errors.InvalidArgument(message_of(exc, flags))


def worker_exit_code(end: WorkerEnd) -> ExitCode:
    """How a worker's run ended, as the `worker` command's exit code."""
    return {"stopped": ExitCode.OK, "errors": ExitCode.WORKER_ERRORS,
            "released": ExitCode.WORKER_SHUTDOWN_TIMEOUT,
            "interrupted": ExitCode.INTERRUPTED}[end.value]


def skip_row(skip: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
    """A bulk action's skipped activity as printed: with the exit code its error has."""
    return {**skip, "exit_code": int(exit_code_of(exc))}

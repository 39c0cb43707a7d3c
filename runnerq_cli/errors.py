"""Error kinds and the process exit codes they map to.

Kept free of heavy imports: the CLI imports this module on every run,
including shell completion.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Documented exit codes of `runnerq-mongo` (docs/reference.md: "Exit codes")."""

    OK = 0
    FAILURE = 1  # an unexpected error; a bug report is welcome
    USAGE = 2  # bad flags, malformed JSON/YAML input, invalid values, not confirmed
    CONFIG = 3  # the configuration file or environment is invalid
    NOT_FOUND = 4  # no such activity / result
    CONFLICT = 5  # duplicate activity or idempotency conflict
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


class RunnerQError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code: ExitCode = ExitCode.FAILURE


class InvalidArgument(RunnerQError, ValueError):
    """A value given by the caller is malformed or out of range."""

    exit_code = ExitCode.USAGE


class ConfigError(RunnerQError):
    """The configuration (file, environment) is invalid."""

    exit_code = ExitCode.CONFIG


class NotFound(RunnerQError, LookupError):
    """The activity (or its result) does not exist."""

    exit_code = ExitCode.NOT_FOUND


class ClaimLost(RunnerQError):
    """The claim (lease) is no longer held: the activity was reclaimed.

    Raised instead of changing anything, so a stale worker cannot overwrite
    the outcome of the worker that holds the activity now.
    """

    exit_code = ExitCode.CLAIM_LOST


class CheckpointConflict(RunnerQError):
    """RunnerQ's `checkpoint_conflict`: the same claim acknowledged its success again with
    a different result. The first result stays; nothing was changed.

    Not a lost claim: the claim did complete the activity, only the repeat disagrees.
    """

    exit_code = ExitCode.CHECKPOINT_CONFLICT


class DuplicateActivity(RunnerQError):
    """`NoReuse`: the idempotency key is already held."""

    exit_code = ExitCode.CONFLICT

    def __init__(self, message: str, existing_id: object = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class IdempotencyConflict(RunnerQError):
    """`AllowReuseOnFailure`: the key's holder has not failed, so it cannot be reused."""

    exit_code = ExitCode.CONFLICT

    def __init__(self, message: str, existing_id: object = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class WrongState(RunnerQError):
    """An operator action does not apply to the activity's status (e.g. cancel a running one).

    Nothing was changed; `status` is what the activity was found in.
    """

    exit_code = ExitCode.WRONG_STATE

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(RunnerQError):
    """The MongoDB server could not be reached or did not answer in time.

    `reachable` is True when the server answered but refused (credentials):
    then pointing at another server is no help.
    """

    exit_code = ExitCode.UNAVAILABLE

    def __init__(self, message: str, reachable: bool = False) -> None:
        super().__init__(message)
        self.reachable = reachable


class AddressInUse(RunnerQError):
    """`metrics serve`: another process listens on the address already."""

    exit_code = ExitCode.ADDRESS_IN_USE

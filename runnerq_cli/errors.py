"""The kinds of error the API raises on purpose.

They say what went wrong, never how a terminal should show it: a message names the
API's parameters (`max_count must be at least 1`), and the command line maps each
kind to its exit code and each parameter to its flag (cli/exits.py).

Kept free of heavy imports: the CLI imports this module on every run,
including shell completion.
"""

from __future__ import annotations

from datetime import datetime


class RunnerQError(Exception):
    """Base of every error this package raises on purpose."""


class InvalidArgument(RunnerQError, ValueError):
    """A value given by the caller is malformed or out of range.

    `parameters` are the API parameters the message names, as written in it (the
    command line writes each as its flag).
    """

    def __init__(self, message: str, *parameters: str) -> None:
        super().__init__(message)
        self.parameters = parameters


class ConfigError(RunnerQError):
    """The configuration (file, environment) is invalid."""


class NotFound(RunnerQError, LookupError):
    """The activity (or its result) does not exist."""


class ClaimLost(RunnerQError):
    """The claim (lease) is no longer held: the activity was reclaimed.

    Raised instead of changing anything, so a stale worker cannot overwrite
    the outcome of the worker that holds the activity now.
    """


class ActivityCancelled(ClaimLost):
    """The claim was ended by an operator's cancel (docs/design.md, "Cancelling a running
    activity"): a lost claim, told apart so the worker can say so (`ctx.cancelled`)."""


class CheckpointConflict(RunnerQError):
    """RunnerQ's `checkpoint_conflict`: the same claim acknowledged its success again with
    a different result. The first result stays; nothing was changed.

    Not a lost claim: the claim did complete the activity, only the repeat disagrees.
    """


class AlreadyExists(RunnerQError):
    """A name that must be unique is taken (a schedule's)."""


class DuplicateActivity(RunnerQError):
    """`NoReuse`: the idempotency key is already held."""


    def __init__(self, message: str, existing_id: object = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class IdempotencyConflict(RunnerQError):
    """`AllowReuseOnFailure`: the key's holder has not failed, so it cannot be reused."""


    def __init__(self, message: str, existing_id: object = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class WrongState(RunnerQError):
    """An operator action does not apply to the activity's status (e.g. cancel a running one).

    Nothing was changed; `status` is what the activity was found in.
    """


    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(RunnerQError):
    """The MongoDB server could not be reached or did not answer in time.

    `reachable` is True when the server answered but refused (credentials):
    then pointing at another server is no help.

    `since` is when this process first found the server away in the outage the error
    belongs to (the driver boundary sets it, UTC, this machine's clock: the server's is
    out of reach), None when unknown; it stays the same until the server answers again.
    """

    def __init__(self, message: str, reachable: bool = False) -> None:
        super().__init__(message)
        self.reachable = reachable
        self.since: datetime | None = None


class AddressInUse(RunnerQError):
    """`metrics serve`: another process listens on the address already."""



class WriteRefused(RunnerQError):
    """The server refused a write for what was sent (a document it will not store, a
    value its validation rejects): sending the same again changes nothing.

    `code` is the server's error code (the first refusal's); `refusals` the refused
    writes of a batch, each `{"index": position in what was sent, "code", "errmsg"}`.
    """

    def __init__(self, message: str, code: int | None = None,
                 refusals: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.refusals = refusals or []


class DuplicateKey(WriteRefused):
    """A unique index holds the key already (every refusal of the batch is one)."""


class TooLarge(WriteRefused):
    """A document or command over the server's size limit (refused before it is sent)."""


class WriteUnconfirmed(RunnerQError):
    """The server may have applied the write but did not confirm its write concern, or
    interrupted it before doing it (shutting down, stepping down: the codes of
    store/failures.py's INTERRUPTED_CODES): the write may be repeated (as after a lost
    connection)."""

    def __init__(self, message: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class PurgeInterrupted(Exception):
    """A purge stopped between batches (a signal); `counts` is what it deleted."""

    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__("purge interrupted")
        self.counts = counts


class ConnectionInterrupted(Unavailable):
    """The connection broke during a command (a network error, a primary stepping down).

    Unlike a server that never answered (`Unavailable` itself), one more try may
    succeed at once: statements.py retries once, as the driver would.
    """


class NoPrimary(ConnectionInterrupted):
    """The server answered that it is not the primary (NotWritablePrimary,
    NotPrimaryNoSecondaryOk and the like): an election is under way (a stepdown, a
    failover, a member restarting). The driver finds the new primary within seconds;
    long-running commands wait for it, a one-shot command exits 6 at once.
    `shutting_down`: the server said it is on its way down (a restart, also of a
    standalone), so no election is promised."""

    def __init__(self, message: str, *, shutting_down: bool = False) -> None:
        super().__init__(message)
        self.shutting_down = shutting_down


class MemberUnreachable(ConnectionInterrupted):
    """The server answered that it could not reach another member of the deployment
    (HostUnreachable, NetworkTimeout...: a mongos and its shards, a member and the
    others): the command's outcome is unknown, as after a lost connection."""


class TimedOut(Unavailable):
    """The server was reached but did not answer one command within `socket_timeout`.

    Not "unreachable": the server is there and slow (a large batch on a small
    server, a lock), so the advice is to ask less at once, not to start another.
    `seconds` is the timeout that expired, when the driver said it.
    """

    def __init__(self, message: str, seconds: float | None) -> None:
        super().__init__(message, reachable=True)
        self.seconds = seconds


class CommandFailed(RunnerQError):
    """The server answered a command with an error that is neither an outage
    (`Unavailable`) nor a refused write (`WriteRefused`): a hint it cannot use, a command
    it lacks, a type it will not compare. Translated once, at the driver boundary
    (store/driver.py), so no caller meets a pymongo error.

    `code` and `code_name` are the server's (None when it gave none); `retryable` is
    True when the driver labelled it so (sending it again may succeed).
    """

    def __init__(self, message: str, code: int | None = None, code_name: str | None = None,
                 retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.code_name = code_name
        self.retryable = retryable


class CommandTimedOut(CommandFailed):
    """The server gave up a command past its own time limit (`max_time_ms`): it is there,
    the command asked too much; the same command later may finish."""


def retry_later(exc: BaseException) -> bool:
    """Whether a write that raised `exc` may succeed as it is when tried again later (the
    worker keeps such an acknowledgement to retry): the server could not be reached
    (`Unavailable`, a slow one included), could not confirm it (`WriteUnconfirmed`), gave
    up in time (`CommandTimedOut`) or said so (a retryable `CommandFailed`). Anything else
    is a refusal of what was sent: sending it again changes nothing."""
    if isinstance(exc, Unavailable | WriteUnconfirmed | CommandTimedOut):
        return True
    return isinstance(exc, CommandFailed) and exc.retryable

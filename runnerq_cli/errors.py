"""The kinds of error the API raises on purpose.

They say what went wrong, never how a terminal should show it: a message names the
API's parameters (`max_count must be at least 1`), and the command line maps each
kind to its exit code and each parameter to its flag (cli/exits.py).

Kept free of heavy imports: the CLI imports this module on every run,
including shell completion.
"""

from __future__ import annotations


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


class CheckpointConflict(RunnerQError):
    """RunnerQ's `checkpoint_conflict`: the same claim acknowledged its success again with
    a different result. The first result stays; nothing was changed.

    Not a lost claim: the claim did complete the activity, only the repeat disagrees.
    """


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
    """


    def __init__(self, message: str, reachable: bool = False) -> None:
        super().__init__(message)
        self.reachable = reachable


class AddressInUse(RunnerQError):
    """`metrics serve`: another process listens on the address already."""


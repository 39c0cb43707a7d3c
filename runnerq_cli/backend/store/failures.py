"""What a driver call that raised means: the driver's exception as one of ours.

The boundary (boundary.py) runs every call to MongoDB and, when one raises, hands the
exception here once (`translated`), so no caller meets a pymongo error. This module is
loaded only then: a run whose calls all succeed (one `enqueue`) never compiles it
(benchmarks/bench_cli_startup.py, uncached byte-code; tests/test_import_cost.py).

- Connection errors, timeouts and refused credentials are `Unavailable` (URI redacted;
  `TimedOut`, `NoPrimary`, `MemberUnreachable`, `ConnectionInterrupted` by what the
  driver or server said: `translation`), each carrying since when the server is away
  (connection.went_away).
- Refused writes are our own kinds (`refusal`): a duplicate key `DuplicateKey`, a
  refused document or batch `WriteRefused` (with each refusal's index and code), a
  document over the size limit `TooLarge`, an unconfirmed write concern
  `WriteUnconfirmed`. A part that expects some of them (a key another writer holds)
  catches ours.
- Every other driver error is `CommandFailed` (`CommandTimedOut` past `max_time_ms`),
  with the server's code (`failure`).

The same rules serve below the boundary: statements.py reads a batch's write errors
with `interrupted`, and `server_away` says whether a write may succeed later, for our
errors and for a plain pymongo collection's.
"""

from __future__ import annotations

import re
from typing import Any

from pymongo import errors as mongo_errors

from runnerq_cli.backend.store import connection
from runnerq_cli.errors import (
    CommandFailed,
    CommandTimedOut,
    ConnectionInterrupted,
    DuplicateKey,
    MemberUnreachable,
    NoPrimary,
    RunnerQError,
    TimedOut,
    TooLarge,
    Unavailable,
    WriteRefused,
    WriteUnconfirmed,
    retry_later,
)
from runnerq_cli.redaction import redact_uri

DUPLICATE_KEY = 11000  # the server's code for a key a unique index holds already
# The codes by which a server says it did not do the write *now* (it is shutting down,
# stepping down, not the primary, or lost its network), not that it refuses it: the
# retryable-writes specification's list. A write answered so is tried again later, as
# after a lost connection, wherever the code comes: a command's error or a write error
# inside a batch's reply (a stepdown interrupts some statements of an unordered batch).
INTERRUPTED_CODES = frozenset({
    6,      # HostUnreachable
    7,      # HostNotFound
    89,     # NetworkTimeout
    91,     # ShutdownInProgress
    133,    # FailedToSatisfyReadPreference (a mongos: a shard with no primary)
    189,    # PrimarySteppedDown
    262,    # ExceededTimeLimit
    9001,   # SocketException
    10107,  # NotWritablePrimary
    11600,  # InterruptedAtShutdown
    11602,  # InterruptedDueToReplStateChange
    13435,  # NotPrimaryNoSecondaryOk
    13436,  # NotPrimaryOrSecondary
})


def translated(exc: BaseException, uri: str) -> RunnerQError:
    """Ours for the driver error `exc` of a call to `uri` (the boundary's one translation):
    an outage's error carries since when the server is away."""
    error = translation(exc, uri) or refusal(exc) or failure(exc)
    if isinstance(error, TimedOut):  # a stall: since the command was sent
        error.since = connection.went_away(uri, ago=error.seconds or 0.0)
    elif isinstance(error, Unavailable) and not error.reachable:
        error.since = connection.went_away(uri)  # the outage's start
    return error


def interrupted(write_errors: list[dict[str, Any]]) -> WriteUnconfirmed | None:
    """A batch's write errors that say "not now" (INTERRUPTED_CODES) as one error to try
    the whole batch again later (its writes are fenced: a repeat changes nothing), or
    None when every error is a refusal of what was sent."""
    first = next((e for e in write_errors if e.get("code") in INTERRUPTED_CODES), None)
    if first is None:
        return None
    return WriteUnconfirmed(f"the server interrupted the write (code {first.get('code')}): "
                            f"{str(first.get('errmsg') or 'no reason given')[:300]}",
                            {"writeErrors": write_errors})


def refusal(exc: BaseException) -> RunnerQError | None:
    """Our kind of a refused write the driver raised, or None (not a refusal)."""
    if isinstance(exc, mongo_errors.DocumentTooLarge):
        return TooLarge(f"too large for the server: {exc}")
    if isinstance(exc, mongo_errors.WriteConcernError):
        return WriteUnconfirmed(f"the write concern was not confirmed: {exc}",
                                    dict(exc.details or {}))
    if isinstance(exc, mongo_errors.BulkWriteError):
        refusals = [{"index": e.get("index"), "code": e.get("code"),
                     "errmsg": e.get("errmsg", "")} for e in exc.details.get("writeErrors", [])]
        if (later := interrupted(refusals)) is not None:
            return later
        if not refusals:  # applied; only the write concern failed
            return WriteUnconfirmed(f"the write concern was not confirmed: {exc}",
                                    dict(exc.details or {}))
        return refused(refusals)
    if isinstance(exc, mongo_errors.WriteError):  # DuplicateKeyError included
        details = exc.details or {}
        one = [{"index": 0, "code": exc.code, "errmsg": details.get("errmsg", str(exc))}]
        return interrupted(one) or refused(one)
    return None


def failure(exc: BaseException) -> CommandFailed:
    """Every other driver error, as ours: the server's code and message (URI redacted)."""
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None) or {}
    name = details.get("codeName") if isinstance(details, dict) else None
    retryable = code in INTERRUPTED_CODES or (isinstance(exc, mongo_errors.PyMongoError)
                                               and bool(exc.has_error_label("RetryableWriteError")
                                                        or exc.timeout))
    kind = CommandTimedOut if isinstance(exc, mongo_errors.ExecutionTimeout) else CommandFailed
    return kind(f"MongoDB error: {redact_uri(str(exc))[:1000]}",
                code if isinstance(code, int) else None,
                name if isinstance(name, str) else None, retryable)


def server_away(exc: BaseException) -> bool:
    """Whether a write that raised `exc` may succeed as it is when tried again later
    (errors.py's `retry_later`, for the project's kinds), or the same said by a
    driver error met below the boundary (a plain pymongo collection of statements.py)."""
    if retry_later(exc):
        return True
    if isinstance(exc, mongo_errors.ConnectionFailure | mongo_errors.WriteConcernError
                  | mongo_errors.ExecutionTimeout):
        return True
    # Retryable as the boundary judges it (a label, a timeout, an interrupted code).
    return isinstance(exc, mongo_errors.PyMongoError) and failure(exc).retryable


def refused(refusals: list[dict[str, Any]]) -> WriteRefused:
    """The error of a batch's refused writes: DuplicateKey when each is a held key."""
    first = refusals[0]
    kind = DuplicateKey if all(r.get("code") == DUPLICATE_KEY for r in refusals) else WriteRefused
    more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
    return kind(f"the server refused the write: {first.get('errmsg') or 'refused'}{more}",
                first.get("code"), refusals)


# ------------------------------------------------------------------ the server away

# FailedToSatisfyReadPreference: what a mongos answers while a shard has no primary.
NO_SHARD_PRIMARY = 133
# A server's own network errors, reaching another member (a mongos its shards): the
# retryable-writes list's HostUnreachable, HostNotFound, NetworkTimeout, SocketException.
UNREACHED_MEMBER = frozenset({6, 7, 89, 9001})
# "Not primary" answers (pymongo's NotPrimaryError) of a server on its way down: a
# restart of a standalone as well as of a member, so no election is promised.
SHUTTING_DOWN = frozenset({91, 11600})  # ShutdownInProgress, InterruptedAtShutdown
_DRIVER_NOISE = re.compile(r"\s*\(configured timeouts:[^)]*\)|, Timeout: .*$|\s*,?\s*"
                           r"Topology Description: .*$", re.S)
_AUTH_WORDS = re.compile(r"(?i)\bauth(?:entication)? failed\b|\bunauthorized\b")


def driver_message(exc: BaseException) -> str:
    """The driver's message without its configuration dump (timeouts, topology)."""
    text = _DRIVER_NOISE.sub("", " ".join(str(exc).split()))
    text = redact_uri(text)
    return text if len(text) <= 200 else text[:197] + "..."


def is_auth_refusal(exc: BaseException) -> bool:
    """The server refused the credentials: by code (Unauthorized, AuthenticationFailed,
    Atlas), or, from servers whose refusal carries no code, by its message."""
    code = getattr(exc, "code", None)
    if code in (13, 18, 8000):
        return True
    details = getattr(exc, "details", None) or {}
    message = details.get("errmsg") if isinstance(details, dict) else None
    return code is None and bool(_AUTH_WORDS.search(str(message or exc)))


def _no_primary(uri: str, said: str, *, shutting_down: bool = False) -> NoPrimary:
    if shutting_down:
        return NoPrimary(f"MongoDB at {redact_uri(uri)} is shutting down ({said}): a "
                         "restart, or a member leaving its replica set", shutting_down=True)
    return NoPrimary(f"MongoDB at {redact_uri(uri)} has no primary to take the command "
                     f"({said}): an election is under way")


def translation(exc: BaseException, uri: str) -> Unavailable | None:
    """The `Unavailable` a driver error stands for (URI redacted), or None to let it pass.

    Connection errors, timeouts and refused credentials are translated; every other
    error (a duplicate key, a refused document...) is the caller's to handle.
    """
    if isinstance(exc, mongo_errors.ServerSelectionTimeoutError):
        waited = re.search(r"Timeout: ([0-9.]+)s", str(exc))
        within = f" within {float(waited.group(1)):g}s" if waited else ""
        return Unavailable(f"MongoDB at {redact_uri(uri)} is unreachable: no answer{within} "
                           f"({driver_message(exc)})")
    if isinstance(exc, mongo_errors.NetworkTimeout) and connection.is_answered(uri):
        waited = re.search(r"socketTimeoutMS: ([0-9.]+)ms", str(exc))
        seconds = float(waited.group(1)) / 1000 if waited else None
        after = f" after {seconds:g} s" if seconds is not None else ""
        return TimedOut(f"MongoDB at {redact_uri(uri)} timed out{after}: it answered the "
                        "connection but not this command in time (socket_timeout)", seconds)
    if isinstance(exc, mongo_errors.AutoReconnect) and connection.is_answered(uri) \
            and "operation cancelled" in str(exc):
        # The server answered before, then stopped answering (stalled, overloaded): the
        # driver's monitor had no answer to its check in time and cancelled this command.
        # A slow server, not one to start: the advice is the timeout's, not "unreachable".
        seconds = connection.check_timeouts.get(uri)
        after = f" after {seconds:g} s" if seconds is not None else ""
        return TimedOut(f"MongoDB at {redact_uri(uri)} timed out{after}: it stopped "
                        "answering during this command (the driver's check of the server "
                        "had no answer within connect_timeout and cancelled it)", seconds)
    if isinstance(exc, mongo_errors.NotPrimaryError):  # answered: "not the primary"
        details = exc.details
        said = (details.get("codeName") or details.get("errmsg")) \
            if isinstance(details, dict) else None
        code = details.get("code") if isinstance(details, dict) else None
        return _no_primary(uri, redact_uri(str(said))[:100] if said else driver_message(exc),
                           shutting_down=code in SHUTTING_DOWN)
    if isinstance(exc, mongo_errors.OperationFailure) and exc.code in UNREACHED_MEMBER:
        # A mongos (or a member) that lost its network to the others: the command's
        # outcome is unknown, as after a lost connection, and the same outage to ride out.
        details = exc.details if isinstance(exc.details, dict) else {}
        said = redact_uri(str(details.get("codeName") or exc.code))[:100]
        return MemberUnreachable(
            f"MongoDB at {redact_uri(uri)} could not reach a member of the deployment "
            f"({said}): a network fault between a mongos and its shards, or between "
            f"members")
    if isinstance(exc, mongo_errors.OperationFailure) and exc.code == NO_SHARD_PRIMARY:
        # A mongos whose shard has no primary (its election, a member restarting) says
        # so with this code, not "not primary": the same outage, ridden out alike.
        return _no_primary(uri, "a shard's: FailedToSatisfyReadPreference")
    if isinstance(exc, mongo_errors.AutoReconnect | mongo_errors.NetworkTimeout
                  | mongo_errors.ConnectionFailure):
        kind = (ConnectionInterrupted if isinstance(exc, mongo_errors.AutoReconnect)
                else Unavailable)
        return kind(f"MongoDB at {redact_uri(uri)} is unreachable: the connection "
                    f"failed ({driver_message(exc)})")
    if isinstance(exc, mongo_errors.OperationFailure) and is_auth_refusal(exc):
        details = exc.details or {}
        return Unavailable(f"MongoDB at {redact_uri(uri)} refused the credentials: "
                           f"{redact_uri(str(details.get('errmsg', exc)))}", reachable=True)
    return None

"""One MongoClient per process, built from the settings, with errors made safe to show."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient
from pymongo import errors as mongo_errors

from runnerq_cli.errors import (
    ConnectionInterrupted,
    InvalidArgument,
    MemberUnreachable,
    NoPrimary,
    TimedOut,
    Unavailable,
)

__all__ = ["ConnectionInterrupted", "TimedOut"]  # defined in errors.py; read from here too
from runnerq_cli.redaction import redact_uri

if TYPE_CHECKING:
    from runnerq_cli.config import Settings

_clients: dict[tuple[str, float, float, float], MongoClient[dict[str, Any]]] = {}
_lock = threading.Lock()


def client_for(settings: Settings) -> MongoClient[dict[str, Any]]:
    """The process-wide client for these connection settings (created once, lazily).

    pymongo clients are thread-safe and pool connections; making one per
    call would open sockets and monitor threads every time.
    """
    key = (settings.uri, settings.server_selection_timeout, settings.connect_timeout,
           settings.socket_timeout)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _new_client(settings)
            _clients[key] = client
            _check_timeouts[settings.uri] = client.options.pool_options.connect_timeout
        return client


def _uri_options(uri: str) -> set[str]:
    """Option names given in the URI's query string, lower-cased."""
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return {part.split("=", 1)[0].lower() for part in query.split("&") if part}


def _new_client(settings: Settings) -> MongoClient[dict[str, Any]]:
    # Timeouts come from the settings unless the URI sets them itself: an
    # option written in the connection string is the most specific wish.
    in_uri = _uri_options(settings.uri)
    timeouts: dict[str, Any] = {
        name: int(seconds * 1000)
        for name, seconds in (("serverSelectionTimeoutMS", settings.server_selection_timeout),
                              ("connectTimeoutMS", settings.connect_timeout),
                              ("socketTimeoutMS", settings.socket_timeout))
        if name.lower() not in in_uri
    }
    try:
        return MongoClient(
            settings.uri,
            uuidRepresentation="standard",
            tz_aware=True,
            appname="runnerq-mongo",
            retryWrites=True,
            connect=False,
            **timeouts,
        )
    except mongo_errors.ConfigurationError as exc:
        raise InvalidArgument(f"invalid MongoDB URI: {redact_uri(str(exc))}") from None
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"invalid MongoDB URI {redact_uri(settings.uri)}: "
                              f"{redact_uri(str(exc))}") from None


def close_clients() -> None:
    """Close every client (tests and the end of long-running commands)."""
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()


# URIs whose server answered once in this process: no more probing for them (a later
# outage is the driver's to retry, and the worker's and tail's to wait out).
_answered: set[str] = set()
# URIs whose server stopped answering, with when it was first found away (UTC): every
# Unavailable of the outage carries that time (`since`) for the commands that ride it out.
_away: dict[str, datetime] = {}
# The seconds the driver's monitor waits for the server's answer to its check (the connect
# timeout), by URI: past it the driver cancels the commands in flight ("operation cancelled").
_check_timeouts: dict[str, float | None] = {}
PROBE_TIMEOUT = 0.5  # seconds; a probe only looks for a refusal, silence is not waited out
_DRIVER_NOISE = re.compile(r"\s*\(configured timeouts:[^)]*\)|, Timeout: .*$|\s*,?\s*"
                           r"Topology Description: .*$", re.S)


def _nodes(uri: str) -> list[tuple[str, int]]:
    """The (host, port) seeds of a mongodb:// URI; none for SRV URIs and Unix sockets."""
    if not uri.startswith("mongodb://"):
        return []
    from pymongo import uri_parser

    try:
        nodes = uri_parser.parse_uri(uri, validate=False, warn=True)["nodelist"]
    except Exception:  # the client reports a bad URI in its own words
        return []
    return [(host, int(port)) for host, port in nodes if not str(host).endswith(".sock")]


def _refused(uri: str, timeout: float) -> str | None:
    """Why no seed of `uri` can be connected to at all, or None if one may answer.

    A refused connection (nothing listens) or a name that does not resolve is an
    answer: saying so at once beats waiting the whole server-selection timeout.
    A silent host (no answer) is left to that timeout.
    """
    import socket

    reasons = []
    for host, port in _nodes(uri):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return None
        except ConnectionRefusedError:
            reasons.append(f"{host}:{port} refused the connection (nothing listens there)")
        except socket.gaierror:
            reasons.append(f"cannot resolve the host name {host!r}")
        except OSError:
            return None  # a timeout or a routing problem: let the driver decide
    return "; ".join(reasons) or None


def driver_message(exc: BaseException) -> str:
    """The driver's message without its configuration dump (timeouts, topology)."""
    text = _DRIVER_NOISE.sub("", " ".join(str(exc).split()))
    text = redact_uri(text)
    return text if len(text) <= 200 else text[:197] + "..."


_AUTH_WORDS = re.compile(r"(?i)\bauth(?:entication)? failed\b|\bunauthorized\b")


def is_auth_refusal(exc: BaseException) -> bool:
    """The server refused the credentials: by code (Unauthorized, AuthenticationFailed,
    Atlas), or, from servers whose refusal carries no code, by its message."""
    code = getattr(exc, "code", None)
    if code in (13, 18, 8000):
        return True
    details = getattr(exc, "details", None) or {}
    message = details.get("errmsg") if isinstance(details, dict) else None
    return code is None and bool(_AUTH_WORDS.search(str(message or exc)))


def probe(uri: str) -> None:
    """The first time `uri` is used in this process, raise `Unavailable` at once when
    every seed refuses the connection (instead of waiting out server selection)."""
    if uri not in _answered:
        reason = _refused(uri, PROBE_TIMEOUT)
        if reason:
            raise Unavailable(f"MongoDB at {redact_uri(uri)} is unreachable: {reason}")


# FailedToSatisfyReadPreference: what a mongos answers while a shard has no primary.
NO_SHARD_PRIMARY = 133
# A server's own network errors, reaching another member (a mongos its shards): the
# retryable-writes list's HostUnreachable, HostNotFound, NetworkTimeout, SocketException.
UNREACHED_MEMBER = frozenset({6, 7, 89, 9001})
# "Not primary" answers (pymongo's NotPrimaryError) of a server on its way down: a
# restart of a standalone as well as of a member, so no election is promised.
SHUTTING_DOWN = frozenset({91, 11600})  # ShutdownInProgress, InterruptedAtShutdown


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
    if isinstance(exc, mongo_errors.NetworkTimeout) and uri in _answered:
        waited = re.search(r"socketTimeoutMS: ([0-9.]+)ms", str(exc))
        seconds = float(waited.group(1)) / 1000 if waited else None
        after = f" after {seconds:g} s" if seconds is not None else ""
        return TimedOut(f"MongoDB at {redact_uri(uri)} timed out{after}: it answered the "
                        "connection but not this command in time (socket_timeout)", seconds)
    if isinstance(exc, mongo_errors.AutoReconnect) and uri in _answered \
            and "operation cancelled" in str(exc):
        # The server answered before, then stopped answering (stalled, overloaded): the
        # driver's monitor had no answer to its check in time and cancelled this command.
        # A slow server, not one to start: the advice is the timeout's, not "unreachable".
        seconds = _check_timeouts.get(uri)
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


def answered(uri: str) -> None:
    """Note that the server of `uri` answered: no more probing for it, and an outage of
    it (went_away) is over."""
    _answered.add(uri)
    if _away:  # (a dict test per call: the usual case costs nothing more)
        _away.pop(uri, None)


def went_away(uri: str, ago: float = 0.0) -> datetime:
    """When the server of `uri` was first found away in its current outage: now for the
    first failure (`ago` seconds before now for a command that waited that long for its
    answer: a stall began when it was sent), the same time for every failure after it
    until it answers again."""
    with _lock:
        return _away.setdefault(uri, datetime.now(UTC) - timedelta(seconds=ago))


def away_since(uri: str) -> datetime | None:
    """When the server of `uri` was found away in an outage no call has answered since
    (went_away), else None: a front end that retries by request (the console) learns
    from it that the server is back."""
    return _away.get(uri)


def is_answered(uri: str) -> bool:
    return uri in _answered

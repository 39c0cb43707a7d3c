"""One MongoClient per process, built from the settings, with errors made safe to show;
and what this process knows of each server: whether it answered, since when it is away.

What a failed call's driver error means (`Unavailable` and its kinds, by what the driver
or the server said) is failures.py's, loaded only when a call failed.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient
from pymongo import errors as mongo_errors

from runnerq_cli.errors import ConnectionInterrupted, InvalidArgument, TimedOut, Unavailable

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
            check_timeouts[settings.uri] = client.options.pool_options.connect_timeout
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
# timeout), by URI: past it the driver cancels the commands in flight ("operation cancelled",
# which failures.translation reads as a stall of that many seconds).
check_timeouts: dict[str, float | None] = {}
PROBE_TIMEOUT = 0.5  # seconds; a probe only looks for a refusal, silence is not waited out


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


def probe(uri: str) -> None:
    """The first time `uri` is used in this process, raise `Unavailable` at once when
    every seed refuses the connection (instead of waiting out server selection)."""
    if uri not in _answered:
        reason = _refused(uri, PROBE_TIMEOUT)
        if reason:
            raise Unavailable(f"MongoDB at {redact_uri(uri)} is unreachable: {reason}")


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

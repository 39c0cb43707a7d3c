"""One MongoClient per process, built from the settings, with errors made safe to show."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pymongo import MongoClient
from pymongo import errors as mongo_errors

from runnerq_cli.errors import InvalidArgument, Unavailable
from runnerq_cli.redaction import redact_uri

if TYPE_CHECKING:
    from runnerq_cli.config import Settings

_clients: dict[tuple, MongoClient] = {}
_lock = threading.Lock()


def client_for(settings: Settings) -> MongoClient:
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
        return client


def _uri_options(uri: str) -> set[str]:
    """Option names given in the URI's query string, lower-cased."""
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return {part.split("=", 1)[0].lower() for part in query.split("&") if part}


def _new_client(settings: Settings) -> MongoClient:
    # Timeouts come from the settings unless the URI sets them itself: an
    # option written in the connection string is the most specific wish.
    in_uri = _uri_options(settings.uri)
    timeouts = {
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


@contextmanager
def translate_errors(uri: str) -> Iterator[None]:
    """Turn driver connection errors into `Unavailable` with the URI redacted."""
    try:
        yield
    except (mongo_errors.ServerSelectionTimeoutError, mongo_errors.AutoReconnect,
            mongo_errors.NetworkTimeout, mongo_errors.ConnectionFailure) as exc:
        detail = redact_uri(str(exc).split(", Timeout:")[0])
        if len(detail) > 200:
            detail = detail[:197] + "..."
        raise Unavailable(f"MongoDB at {redact_uri(uri)} is unreachable: {detail}") from None
    except mongo_errors.OperationFailure as exc:
        if exc.code in (13, 18, 8000):  # Unauthorized, AuthenticationFailed, Atlas auth
            raise Unavailable(f"MongoDB at {redact_uri(uri)} refused the credentials: "
                              f"{redact_uri(str(exc.details.get('errmsg', exc)))}") from None
        raise

"""A local MongoDB-compatible server (mongoeco) for development and tests.

Not a production server: in memory by default (or one SQLite file), no
change streams. It lets a newcomer with no MongoDB and no Docker try the
queue, and the test suite run anywhere.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runnerq_cli.errors import ConfigError, InvalidArgument, RunnerQError


class DevServerUnavailable(ConfigError):
    """mongoeco is not installed (it needs Python 3.13 or newer): the set-up, exit 3."""


class PortInUse(InvalidArgument):
    """Another process listens on the port (it may have taken it a moment ago): the
    `port` given cannot be used, exit 2."""


# The kinds of `$in` values matched by a hashed look-up (_hashed_in): a candidate of one
# of these kinds equals a value of them only if both are the same value.
_HASHED_KINDS = ("uuid", "objectid")


def _hashed_in() -> None:
    """Match `{field: {$in: [ids...]}}` by a hashed look-up instead of one comparison per
    document and listed value.

    mongoeco 4.11's compiled filters compare every document with every value of an
    `$in` (its full BSON comparison each time): a batch of a bulk action reading 500
    UUIDs over 2,000 activities took 4 to 25 s, and the driver's check of the server
    gives up after 5 s and cancels the command (benchmarks/README.md, "Bulk work"). Here
    an `$in` whose values are all UUIDs or ObjectIds looks each candidate of those
    kinds up in a set of the values' keys (mongoeco's own `hashable_in_lookup_key`, as
    its uncompiled matcher does); a candidate of another kind (a missing field, a
    string) is compared with each value as before, so nothing matches differently.
    Applied once; mongoeco's internals not as expected leave it as it is.
    """
    try:
        from mongoeco.core import compiled_query
        from mongoeco.core._filtering_support import hashable_in_lookup_key
        from mongoeco.core.query_plan import InCondition
    except ImportError:
        return
    compiled = compiled_query.CompiledQuery
    original = getattr(compiled, "_node_to_code", None)
    if original is None or getattr(original, "hashed_in", False) or not all(
            hasattr(compiled, name) for name in ("_store", "_local", "_field")):
        return

    def node_to_code(self: Any, node: Any, depth: int) -> str:
        if not isinstance(node, InCondition) or len(node.values) < 2:
            return str(original(self, node, depth))
        keys = [hashable_in_lookup_key(value) for value in node.values]
        if any(key is None or key[0] not in _HASHED_KINDS for key in keys):
            return str(original(self, node, depth))
        lookup = self._store("values", frozenset(keys))
        key_of = self._store("values", hashable_in_lookup_key)
        items = self._store("values", node.values)
        key = self._local("in_key")
        return (
            f"any(({key} in {lookup}) if ({key} := {key_of}(candidate)) is not None "
            f"and {key}[0] in {_HASHED_KINDS!r} else any(_in_matches(candidate, item, "
            f"null_matches_undefined={node.null_matches_undefined}, dialect=dialect, "
            f"collation=collation) for item in {items}) "
            f"for candidate in (_extract(doc, {self._field(node.field)}) or [None]))")

    node_to_code.hashed_in = True  # type: ignore[attr-defined]
    setattr(compiled, "_node_to_code", node_to_code)  # noqa: B010 (a method replaced)


def _engine(path: Path | None) -> Any:
    _hashed_in()
    try:
        if path is None:
            from mongoeco.engines.memory import MemoryEngine

            return MemoryEngine()
        from mongoeco.engines.sqlite import SQLiteEngine

        return SQLiteEngine(str(path))
    except ImportError:
        raise DevServerUnavailable(
            "the dev server needs the 'mongoeco' package (Python 3.13 or newer): "
            "pip install 'mongoeco>=4.11' (from a clone: pip install -e '.[dev-server]')"
        ) from None


def _proxy(engine: Any, host: str, port: int) -> Any:
    from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

    return AsyncMongoEcoProxyServer(engine=engine, host=host, port=port)


@dataclass
class RunningServer:
    uri: str
    host: str
    port: int
    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread
    _stop: asyncio.Event

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


def start_in_thread(host: str = "127.0.0.1", port: int = 0,
                    path: Path | None = None) -> RunningServer:
    """Start the server on its own event loop in a daemon thread; returns when it listens."""
    engine = _engine(path)
    ready = threading.Event()
    state: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        stop = asyncio.Event()

        async def main() -> None:
            server = _proxy(engine, host, port)
            try:
                address = await server.start()
            except Exception as exc:  # reported to the caller below
                state["error"] = exc
                ready.set()
                return
            state.update(address=address, loop=loop, stop=stop)
            ready.set()
            await stop.wait()
            await server.close()

        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=run, name="runnerq-dev-server", daemon=True)
    thread.start()
    ready.wait(timeout=30)
    if "error" in state:
        error = state["error"]
        if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
            raise PortInUse(f"cannot listen on {host}:{port}: address already in use (is a "
                            "MongoDB already running there? choose another --port)")
        reason = " ".join(str(error).split())[:200]
        import sqlite3

        if isinstance(error, sqlite3.Error) and path is not None:
            raise InvalidArgument(f"--path {path}: not usable as the dev server's SQLite "
                                  f"file ({reason})")
        if isinstance(error, OSError):  # e.g. an address this host does not have
            raise InvalidArgument(f"cannot listen on {host}:{port}: {reason}")
        raise RunnerQError(f"dev server failed to start on {host}:{port}: {reason}")
    if "address" not in state:
        raise RunnerQError("dev server did not start within 30 s")
    address = state["address"]
    return RunningServer(address.uri, address.host, address.port, state["loop"], thread,
                         state["stop"])

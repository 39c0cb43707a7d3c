"""A local MongoDB-compatible server (mongoeco) for development and tests.

Not a production server: in memory by default (or one SQLite file), no
change streams. It lets a newcomer with no MongoDB and no Docker try the
queue, and the test suite run anywhere.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bson import ObjectId

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


# The kinds of `_id` a keyed look-up settles (_ids_by_key): a value of one of these kinds
# equals only itself, so the engine's storage key of the value finds every equal `_id`.
_KEYED_ID_KINDS = (ObjectId, uuid.UUID, str)


def _ids_by_key() -> None:
    """Settle "which document has this `_id`" by the collection's storage key, never by
    reading every document, when the `_id` is an ObjectId, a UUID or a text.

    mongoeco 4.11's memory engine reads the whole collection in two places where a
    look-up by key gives the same answer for these kinds (numbers are left alone: 1 and
    1.0 are the same `_id` under different keys):
    - a filter naming one `_id` the collection does not hold: it looks the `_id` up,
      finds nothing, then reads every document. Every stamped insert is such an upsert
      (docs/design.md, "Following events");
    - the duplicate check of an insert: it compares the new `_id` with every stored one
      after its look-up by key has already answered.
    So each write cost a scan: a bulk action's 500 event copies into 2,000 events took
    about 30 s, far past the driver's 5 s check of the server (benchmarks/README.md,
    "Bulk work"). Applied once; mongoeco's internals not as expected leave it as it is.
    """
    try:
        from mongoeco.engines.memory import MemoryEngine
    except ImportError:
        return
    names = ("_candidate_items_for_plan_locked", "_ensure_unique_indexes",
             "_direct_id_lookup_from_plan", "_storage_key")
    if not all(hasattr(MemoryEngine, name) for name in names) or getattr(
            MemoryEngine._candidate_items_for_plan_locked, "ids_by_key", False):
        return
    find = MemoryEngine._candidate_items_for_plan_locked
    ensure_unique = MemoryEngine._ensure_unique_indexes

    def candidates(self: Any, coll: Any, query_plan: Any, **options: Any) -> Any:
        wanted = self._direct_id_lookup_from_plan(query_plan)
        if (isinstance(wanted, _KEYED_ID_KINDS) and options.get("collation") is None
                and self._storage_key(wanted) not in coll):
            return []
        return find(self, coll, query_plan, **options)

    def unique(self: Any, db_name: str, coll_name: str, candidate: Any,
               **options: Any) -> Any:
        if options.get("check_id_storage") and isinstance(candidate.get("_id"),
                                                          _KEYED_ID_KINDS):
            options["scan_payload_id"] = False
        return ensure_unique(self, db_name, coll_name, candidate, **options)

    candidates.ids_by_key = True  # type: ignore[attr-defined]
    setattr(MemoryEngine, "_candidate_items_for_plan_locked", candidates)  # noqa: B010
    setattr(MemoryEngine, "_ensure_unique_indexes", unique)  # noqa: B010


def _engine(path: Path | None) -> Any:
    _hashed_in()
    _ids_by_key()
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

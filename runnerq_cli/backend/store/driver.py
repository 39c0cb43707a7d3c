"""The one driver boundary: the queue's collections and database, with errors translated.

Every backend part reaches MongoDB through a `Collection` or a `Database` of this
module, handed out by the queue's context (context.py). Each call, and each step
of a cursor or change stream they return, turns the driver's connection errors
into `Unavailable` (URI redacted, connection.translation) once, here, so no
caller can reach MongoDB untranslated: the parts are safe to call directly.

Every other driver error is `CommandFailed` (`CommandTimedOut` past `max_time_ms`), with
the server's code. Refused writes become our own kinds too (`refusal`): a duplicate key
`DuplicateKey`, a refused document or batch `WriteRefused` (with each refusal's
index and code), a document over the size limit `TooLarge`, an unconfirmed write
concern `WriteUnconfirmed`. A part that expects some of them (a key another
writer holds) catches ours; an API caller never meets a pymongo error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from bson.codec_options import CodecOptions
from bson.errors import BSONError
from pymongo import IndexModel
from pymongo import errors as mongo_errors
from pymongo.change_stream import CollectionChangeStream
from pymongo.collection import Collection as PyCollection
from pymongo.command_cursor import CommandCursor
from pymongo.cursor import Cursor as PyCursor
from pymongo.database import Database as PyDatabase
from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)
from pymongo.write_concern import WriteConcern

from runnerq_cli.backend.store import connection
from runnerq_cli.errors import (
    CommandFailed,
    CommandTimedOut,
    DuplicateKey,
    RunnerQError,
    TimedOut,
    TooLarge,
    Unavailable,
    WriteRefused,
    WriteUnconfirmed,
    retry_later,
)

Document = dict[str, Any]
P = ParamSpec("P")
T = TypeVar("T")
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
    from runnerq_cli.redaction import redact_uri

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


class _Boundary:
    """Runs driver calls for one URI, translating their connection errors."""

    __slots__ = ("uri",)

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        uri = self.uri
        if not connection.is_answered(uri):
            connection.probe(uri)
        try:
            value = fn(*args, **kwargs)
        except (mongo_errors.PyMongoError, mongo_errors.DocumentTooLarge,  # (not one)
                BSONError) as exc:  # a value BSON cannot encode, a reply it cannot decode
            translated = connection.translation(exc, uri) or refusal(exc) or failure(exc)
            if isinstance(translated, TimedOut):  # a stall: since the command was sent
                translated.since = connection.went_away(uri, ago=translated.seconds or 0.0)
            elif isinstance(translated, Unavailable) and not translated.reachable:
                translated.since = connection.went_away(uri)  # the outage's start
            raise translated from None
        connection.answered(uri)
        return value


class Cursor:
    """A find cursor whose iteration translates errors (pymongo's Cursor, narrowed)."""

    __slots__ = ("_boundary", "_cursor")

    def __init__(self, boundary: _Boundary, cursor: PyCursor[Any]) -> None:
        self._boundary = boundary
        self._cursor = cursor

    def sort(self, key: Sequence[tuple[str, int]] | str, direction: int | None = None,
             ) -> Cursor:
        if isinstance(key, str):
            self._cursor.sort(key, direction if direction is not None else 1)
        else:
            self._cursor.sort(list(key))
        return self

    def skip(self, count: int) -> Cursor:
        self._cursor.skip(count)
        return self

    def limit(self, count: int) -> Cursor:
        self._cursor.limit(count)
        return self

    def hint(self, index: str | Sequence[tuple[str, int]]) -> Cursor:
        self._cursor.hint(index if isinstance(index, str) else list(index))
        return self

    def batch_size(self, size: int) -> Cursor:
        self._cursor.batch_size(size)
        return self

    def __iter__(self) -> Cursor:
        return self

    def __next__(self) -> Document:
        return self._boundary.call(self._cursor.__next__)

    def close(self) -> None:
        self._cursor.close()

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CommandResults:
    """An aggregation's cursor whose iteration translates errors."""

    __slots__ = ("_boundary", "_cursor")

    def __init__(self, boundary: _Boundary, cursor: CommandCursor[Any]) -> None:
        self._boundary = boundary
        self._cursor = cursor

    def __iter__(self) -> CommandResults:
        return self

    def __next__(self) -> Document:
        return self._boundary.call(self._cursor.__next__)

    def close(self) -> None:
        self._cursor.close()


class ChangeStream:
    """A collection's change stream whose waits translate errors."""

    __slots__ = ("_boundary", "_stream")

    def __init__(self, boundary: _Boundary, stream: CollectionChangeStream[Any]) -> None:
        self._boundary = boundary
        self._stream = stream

    @property
    def alive(self) -> bool:
        return bool(self._stream.alive)

    def try_next(self) -> Document | None:
        return self._boundary.call(self._stream.try_next)

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> ChangeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Collection:
    """One collection of the queue: pymongo's operations the backend uses, translated."""

    __slots__ = ("_boundary", "_collection")

    def __init__(self, boundary: _Boundary, collection: PyCollection[Any]) -> None:
        self._boundary = boundary
        self._collection = collection

    @property
    def name(self) -> str:
        return self._collection.name

    @property
    def codec_options(self) -> CodecOptions[Any]:
        return self._collection.codec_options

    @property
    def write_concern(self) -> WriteConcern:
        return self._collection.write_concern

    @property
    def database(self) -> Database:
        return Database(self._boundary, self._collection.database)

    def with_options(self, **options: Any) -> Collection:
        return Collection(self._boundary, self._collection.with_options(**options))

    # ------------------------------------------------------------------ reads

    def find(self, filter: Mapping[str, Any] | None = None,
             projection: Mapping[str, Any] | Sequence[str] | None = None,
             **kwargs: Any) -> Cursor:
        """A cursor (no round trip until it is iterated)."""
        cursor = self._collection.find(filter, projection, **kwargs)
        return Cursor(self._boundary, cursor)

    def find_one(self, filter: Mapping[str, Any] | None = None,
                 projection: Mapping[str, Any] | Sequence[str] | None = None,
                 **kwargs: Any) -> Document | None:
        return self._boundary.call(self._collection.find_one, filter, projection, **kwargs)

    def count_documents(self, filter: Mapping[str, Any], **kwargs: Any) -> int:
        return self._boundary.call(self._collection.count_documents, filter, **kwargs)

    def estimated_document_count(self) -> int:
        return self._boundary.call(self._collection.estimated_document_count)

    def distinct(self, key: str, filter: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> list[Any]:
        return self._boundary.call(self._collection.distinct, key, filter, **kwargs)

    def aggregate(self, pipeline: Sequence[Mapping[str, Any]], **kwargs: Any,
                  ) -> CommandResults:
        cursor = self._boundary.call(self._collection.aggregate, list(pipeline), **kwargs)
        return CommandResults(self._boundary, cursor)

    def watch(self, pipeline: Sequence[Mapping[str, Any]] | None = None,
              **kwargs: Any) -> ChangeStream:
        stream = self._boundary.call(self._collection.watch, pipeline, **kwargs)
        return ChangeStream(self._boundary, stream)

    # ----------------------------------------------------------------- writes

    def insert_one(self, document: Mapping[str, Any], **kwargs: Any) -> InsertOneResult:
        return self._boundary.call(self._collection.insert_one, document, **kwargs)

    def insert_many(self, documents: Sequence[Mapping[str, Any]], **kwargs: Any,
                    ) -> InsertManyResult:
        return self._boundary.call(self._collection.insert_many, documents, **kwargs)

    def update_one(self, filter: Mapping[str, Any], update: Mapping[str, Any] | Sequence[Any],
                   **kwargs: Any) -> UpdateResult:
        return self._boundary.call(self._collection.update_one, filter, update, **kwargs)

    def update_many(self, filter: Mapping[str, Any], update: Mapping[str, Any] | Sequence[Any],
                    **kwargs: Any) -> UpdateResult:
        return self._boundary.call(self._collection.update_many, filter, update, **kwargs)

    def replace_one(self, filter: Mapping[str, Any], replacement: Mapping[str, Any],
                    **kwargs: Any) -> UpdateResult:
        return self._boundary.call(self._collection.replace_one, filter, replacement, **kwargs)

    def find_one_and_update(self, filter: Mapping[str, Any],
                            update: Mapping[str, Any] | Sequence[Any],
                            **kwargs: Any) -> Document | None:
        return self._boundary.call(self._collection.find_one_and_update, filter, update,
                                   **kwargs)

    def delete_one(self, filter: Mapping[str, Any], **kwargs: Any) -> DeleteResult:
        return self._boundary.call(self._collection.delete_one, filter, **kwargs)

    def delete_many(self, filter: Mapping[str, Any], **kwargs: Any) -> DeleteResult:
        return self._boundary.call(self._collection.delete_many, filter, **kwargs)

    def bulk_write(self, requests: Sequence[Any], **kwargs: Any) -> BulkWriteResult:
        return self._boundary.call(self._collection.bulk_write, requests, **kwargs)

    # ---------------------------------------------------------------- indexes

    def list_indexes(self) -> list[Document]:
        return self._boundary.call(lambda: [dict(ix) for ix in self._collection.list_indexes()])

    def index_information(self) -> dict[str, Any]:
        return self._boundary.call(lambda: dict(self._collection.index_information()))

    def create_index(self, keys: str | Sequence[tuple[str, int]], **kwargs: Any) -> str:
        spec = keys if isinstance(keys, str) else list(keys)
        return self._boundary.call(self._collection.create_index, spec, **kwargs)

    def create_indexes(self, models: Sequence[IndexModel]) -> list[str]:
        """Several indexes in one command (init-indexes: one per collection)."""
        return self._boundary.call(lambda: list(self._collection.create_indexes(list(models))))

    def drop_index(self, name: str) -> None:
        self._boundary.call(self._collection.drop_index, name)


class Database:
    """The queue's database: the commands the backend sends, translated."""

    __slots__ = ("_boundary", "_db")

    def __init__(self, boundary: _Boundary, db: PyDatabase[Any]) -> None:
        self._boundary = boundary
        self._db = db

    @classmethod
    def wrap(cls, uri: str, db: PyDatabase[Any]) -> Database:
        """The boundary for the database `db`, reached by the (unredacted) `uri`."""
        return cls(_Boundary(uri), db)

    @property
    def name(self) -> str:
        return self._db.name

    @property
    def codec_options(self) -> CodecOptions[Any]:
        return self._db.codec_options

    def __getitem__(self, name: str) -> Collection:
        return Collection(self._boundary, self._db[name])

    def sibling(self, name: str) -> Database:
        """Another database of the same client, behind the same boundary (doctor reads a
        sharded cluster's `config` database)."""
        return Database(self._boundary, self._db.client[name])

    def command(self, command: str | dict[str, Any], value: Any = 1,
                **kwargs: Any) -> Document:
        answer: Document = self._boundary.call(lambda: self._db.command(command, value, **kwargs))
        return answer

    def admin_command(self, command: str, value: Any = 1, **kwargs: Any) -> Document:
        """A command of the server (`admin` database): hello, buildInfo, getParameter..."""
        admin = self._db.client.admin
        answer: Document = self._boundary.call(lambda: admin.command(command, value, **kwargs))
        return answer

    def list_collection_names(self, *, filter: Mapping[str, Any] | None = None) -> list[str]:
        return self._boundary.call(self._db.list_collection_names, filter=filter)

    def create_collection(self, name: str) -> None:
        """Create `name`; the caller has listed the collections (no second listing here),
        and one created meanwhile fails with OperationFailure (NamespaceExists)."""
        self._boundary.call(lambda: self._db.create_collection(name, check_exists=False))

    @property
    def client_write_concern(self) -> dict[str, Any]:
        """The write concern the client was configured with (URI options)."""
        return dict(self._db.client.write_concern.document)

    @property
    def read_preference(self) -> str:
        """The name of the client's read preference (URI options)."""
        return str(self._db.client.read_preference.name)

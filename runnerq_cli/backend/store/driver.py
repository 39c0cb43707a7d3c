"""The one driver boundary: the queue's collections and database, with errors translated.

Every backend part reaches MongoDB through a `Collection` or a `Database` of this
module, handed out by the queue's context (context.py). Each call, and each step
of a cursor or change stream they return (cursors.py: loaded by the first read, which
a command that only writes never makes), turns a driver error into ours once, in
boundary.py, so no caller can reach MongoDB untranslated: the parts are safe to call
directly, and an API caller never meets a pymongo error.

What each driver error becomes (`Unavailable` with the URI redacted, a refused write's
`DuplicateKey`, `WriteRefused`, `TooLarge` or `WriteUnconfirmed`, else `CommandFailed`)
is failures.py's: loaded by `Boundary.call` (boundary.py) only when a call raised, so a run whose
calls all succeed (one `enqueue`) does not compile it. A part that expects some of
them (a key another writer holds) catches ours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bson.codec_options import CodecOptions
from pymongo import IndexModel
from pymongo.collection import Collection as PyCollection
from pymongo.database import Database as PyDatabase
from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)
from pymongo.write_concern import WriteConcern

from runnerq_cli.backend.store.boundary import Boundary

if TYPE_CHECKING:
    from runnerq_cli.backend.store.cursors import ChangeStream, CommandResults, Cursor

Document = dict[str, Any]


class Collection:
    """One collection of the queue: pymongo's operations the backend uses, translated."""

    __slots__ = ("_boundary", "_collection")

    def __init__(self, boundary: Boundary, collection: PyCollection[Any]) -> None:
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
        from runnerq_cli.backend.store.cursors import Cursor  # (only for a read)

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
        from runnerq_cli.backend.store.cursors import CommandResults  # (only for a read)

        cursor = self._boundary.call(self._collection.aggregate, list(pipeline), **kwargs)
        return CommandResults(self._boundary, cursor)

    def watch(self, pipeline: Sequence[Mapping[str, Any]] | None = None,
              **kwargs: Any) -> ChangeStream:
        from runnerq_cli.backend.store.cursors import ChangeStream  # (only for a watch)

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

    def __init__(self, boundary: Boundary, db: PyDatabase[Any]) -> None:
        self._boundary = boundary
        self._db = db

    @classmethod
    def wrap(cls, uri: str, db: PyDatabase[Any]) -> Database:
        """The boundary for the database `db`, reached by the (unredacted) `uri`."""
        return cls(Boundary(uri), db)

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

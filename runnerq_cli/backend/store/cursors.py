"""What a read returns: a find's cursor, an aggregation's results, a change stream, each
step of which translates driver errors (boundary.py), as driver.py's calls do.

Apart from driver.py because a command that only writes (one `enqueue`) reads nothing
back: it need not compile them (benchmarks/bench_cli_startup.py part 2); driver.py's
`find`, `aggregate` and `watch` load this module."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pymongo.change_stream import CollectionChangeStream
    from pymongo.command_cursor import CommandCursor
    from pymongo.cursor import Cursor as PyCursor

    from runnerq_cli.backend.store.boundary import Boundary

Document = dict[str, Any]


class Cursor:
    """A find cursor whose iteration translates errors (pymongo's Cursor, narrowed)."""

    __slots__ = ("_boundary", "_cursor")

    def __init__(self, boundary: Boundary, cursor: PyCursor[Any]) -> None:
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

    def __init__(self, boundary: Boundary, cursor: CommandCursor[Any]) -> None:
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

    def __init__(self, boundary: Boundary, stream: CollectionChangeStream[Any]) -> None:
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

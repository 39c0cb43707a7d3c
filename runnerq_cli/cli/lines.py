"""The lines of an input file or standard input (`enqueue --from`, `dlq import`), read so
that memory stays bounded and a signal is heard while the input is silent.

Lines come as bytes (each one's UTF-8 is checked by its parser, so one bad line is
refused alone), numbered from 1, without their line break. A line longer than
PAYLOAD_TEXT_MAX is skipped unread to its end and given as None (refused alone).

A pipe whose producer is silent blocks a read for as long as it likes, and Python
restarts a read a signal interrupted (PEP 475): a stop flag set by SIGTERM would be
looked at only when the producer writes again or closes the pipe. So a descriptor is
read only once `select` says it has data, waking every STOP_POLL seconds to ask
`should_stop`: asked to stop, the reader ends at once, after the last whole line it
gave (a line still being written, without its line break, is not a line read).
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable, Iterator
from typing import Any

from runnerq_cli.errors import InvalidArgument

STOP_POLL = 0.05  # seconds: how soon a stop is heard while the input is silent
CHUNK = 1 << 16


def read_lines(path: str, what: str = "FILE",
               should_stop: Callable[[], bool] | None = None,
               ) -> Iterator[tuple[int, bytes | None]]:
    """The lines of `path` (- is standard input), one at a time (module docstring).

    The file is opened here, before the first line is asked for, so a missing
    file is refused before anything is written.
    """
    from runnerq_cli import values

    stop = should_stop or (lambda: False)
    if path != "-":
        values.readable_file(path, what)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise InvalidArgument(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
        return _numbered(_fd_lines(fd, values.PAYLOAD_TEXT_MAX, stop, close=True))
    stdin: Any = getattr(sys.stdin, "buffer", None) or sys.stdin
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # a stream with no descriptor (tests)
        return _numbered(_object_lines(stdin, values.PAYLOAD_TEXT_MAX))
    return _numbered(_fd_lines(fd, values.PAYLOAD_TEXT_MAX, stop, close=False))


def _numbered(lines: Iterator[bytes | None]) -> Iterator[tuple[int, bytes | None]]:
    return enumerate(lines, start=1)


def _readable(fd: int, stop: Callable[[], bool]) -> bool:
    """Wait until `fd` has data (or its end); False as soon as `stop` says so."""
    while not stop():
        try:
            ready, _, _ = select.select([fd], [], [], STOP_POLL)
        except (OSError, ValueError):  # not selectable: read it plainly
            return True
        if ready:
            return True
    return False


def _fd_lines(fd: int, limit: int, stop: Callable[[], bool], *,
              close: bool) -> Iterator[bytes | None]:
    """Lines of a descriptor, through a buffer of at most `limit` + CHUNK bytes."""
    buf = bytearray()
    scanned = 0  # bytes of `buf` known to hold no line break
    too_long = False  # the line in progress passed `limit`: its bytes are dropped
    try:
        while True:
            start = 0
            newline = buf.find(b"\n", scanned)
            while newline >= 0:
                line = None if too_long or newline - start > limit else buf[start:newline]
                too_long = False
                start = newline + 1
                yield None if line is None else bytes(line).rstrip(b"\r")
                newline = buf.find(b"\n", start)
            del buf[:start]
            scanned = len(buf)
            if len(buf) > limit:
                too_long, buf, scanned = True, bytearray(), 0
            if not _readable(fd, stop):
                return
            chunk = os.read(fd, CHUNK)
            if not chunk:
                if too_long:
                    yield None
                elif buf:
                    yield bytes(buf).rstrip(b"\r")
                return
            buf += chunk
    finally:
        if close:
            os.close(fd)


def _object_lines(handle: Any, limit: int) -> Iterator[bytes | None]:
    """Lines of a file object without a descriptor (an in-memory stream)."""
    while True:
        chunk = handle.readline(limit + 1)
        if not chunk:
            return
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", "surrogateescape")
        if len(chunk) > limit and not chunk.endswith(b"\n"):
            while chunk and not chunk.endswith(b"\n"):  # skip the rest of it
                chunk = handle.readline(limit + 1)
                if isinstance(chunk, str):
                    chunk = chunk.encode("utf-8", "surrogateescape")
            yield None
            continue
        yield chunk.rstrip(b"\r\n")

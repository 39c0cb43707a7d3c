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

STOP_POLL = 0.05  # seconds: how soon a stop is heard while the input is silent
CHUNK = 1 << 16


class InputLines:
    """The numbered lines of an input, and how far into it they are: `consumed` bytes
    of the `size` there are to read (a regular file's, standard input redirected from
    one included; None for a pipe or a terminal, whose end is not known ahead). For a
    progress line: the lines given out so far end at byte `consumed`."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        self.consumed = 0
        self._lines: Iterator[bytes | None] = iter(())

    def __iter__(self) -> Iterator[tuple[int, bytes | None]]:
        return enumerate(self._lines, start=1)

    def fraction(self) -> float | None:
        """How much of the input the lines given out cover (0 to 1), None without a size."""
        if self.size is None:
            return None
        return min(1.0, self.consumed / self.size) if self.size else 1.0


def read_lines(path: str, what: str = "FILE",
               should_stop: Callable[[], bool] | None = None) -> InputLines:
    """The lines of `path` (- is standard input), one at a time (module docstring).

    The file is opened here, before the first line is asked for, so a missing
    file is refused before anything is written.
    """
    from runnerq_cli import values
    from runnerq_cli.inputs import open_input

    stop = should_stop or (lambda: False)
    head = b""
    if path != "-":
        opened = open_input(path, what)  # never blocks: a FIFO without a writer is refused
        fd, head = opened.fd, opened.take_head()
        close = True
    else:
        stdin: Any = getattr(sys.stdin, "buffer", None) or sys.stdin
        try:
            fd = stdin.fileno()
        except (AttributeError, OSError, ValueError):  # a stream with no descriptor (tests)
            lines = InputLines()
            lines._lines = _object_lines(stdin, values.PAYLOAD_TEXT_MAX)
            return lines
        close = False
    lines = InputLines(_size_left(fd))
    lines._lines = _fd_lines(fd, values.PAYLOAD_TEXT_MAX, stop, close=close, into=lines,
                             head=head)
    return lines


def _size_left(fd: int) -> int | None:
    """The bytes left to read from `fd` when it is a regular file, else None."""
    import stat

    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return max(0, info.st_size - os.lseek(fd, 0, os.SEEK_CUR))
    except OSError:
        return None


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
              close: bool, into: InputLines, head: bytes = b"") -> Iterator[bytes | None]:
    """Lines of a descriptor (after `head`, its bytes already read), through a buffer of
    at most `limit` + CHUNK bytes; `into` learns where each line given out ends."""
    buf = bytearray(head)
    read = len(head)  # bytes read from `fd`
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
                into.consumed = read - len(buf) + start
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
                into.consumed = read
                if too_long:
                    yield None
                elif buf:
                    yield bytes(buf).rstrip(b"\r")
                return
            read += len(chunk)
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

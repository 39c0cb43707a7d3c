"""Waiting in tests: for a condition, with a deadline, never for a fixed time.

A fixed sleep is too short on a loaded machine (a flaky test) and too long
everywhere else (a slow suite). `wait_until` polls a condition until it holds
or a deadline passes; `LineReader` reads a subprocess's output with a deadline
instead of blocking forever on `readline()`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import IO, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
               message: str = "condition") -> T:
    """Poll `predicate` until it returns a truthy value, and return that value.

    Raises AssertionError naming `message` when `timeout` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {message}")
        time.sleep(interval)


class LineReader:
    """The lines a stream (a subprocess's stdout or stderr) writes, read with a deadline.

    A daemon thread reads the stream into a queue, so a test never blocks on a
    process that prints nothing; every line read is kept in `lines`.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in iter(stream.readline, ""):
            self._queue.put(line)
        self._queue.put(None)  # end of stream

    def readline(self, timeout: float = 30.0) -> str:
        """The next line; AssertionError if none comes within `timeout` seconds.

        Returns "" at the end of the stream, as `readline()` does.
        """
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output line within {timeout:g}s") from None
        if line is None:
            self._queue.put(None)  # stay at the end for later calls
            return ""
        self.lines.append(line)
        return line

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30.0,
                 message: str = "a matching line") -> str:
        """Read lines until one satisfies `predicate`; returns it (AssertionError on timeout
        or when the stream ends first)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {message}; "
                                     f"output so far: {''.join(self.lines)[-2000:]!r}")
            try:
                line = self.readline(timeout=left)
            except AssertionError:
                continue
            if line == "":
                raise AssertionError(f"the stream ended before {message}; "
                                     f"output: {''.join(self.lines)[-2000:]!r}")
            if predicate(line):
                return line

    def rest(self, timeout: float = 30.0) -> str:
        """Everything still to come, up to the end of the stream."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the stream did not end within {timeout:g}s"
        out = []
        while (line := self._queue.get_nowait()) is not None:
            out.append(line)
        self.lines.extend(out)
        self._queue.put(None)
        return "".join(out)

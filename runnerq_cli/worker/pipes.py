"""A shell handler's pipes: the payload in, its output out, with bounded memory.

`subprocess.communicate` keeps all of a command's output in memory (a command printing
400 MB made the worker 1.2 GB) and waits for the end of its output, which a process the
command started and left running may hold open long after the command itself exited (the
attempt then timed out though the command had succeeded). So `exchange` reads the pipes
itself:

- standard output is kept whole up to OUTPUT_MAX_BYTES (twice a result's bound: no
  longer text can be a result); past that only its last `tail` bytes are kept;
- standard error: only its last `tail` bytes;
- once the command has exited, output still arriving is read until none comes for
  EXIT_QUIET seconds, EXIT_READ_MAX at most; then the pipes are closed and the
  command's own exit status decides.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from runnerq_cli.backend.domain.sizes import RESULT_MAX_BYTES

OUTPUT_MAX_BYTES = 2 * RESULT_MAX_BYTES
EXIT_QUIET = 0.1
EXIT_READ_MAX = 1.0
CHUNK = 64 * 1024
POLL = 0.2


@dataclass
class Capture:
    """One stream's output: whole up to `keep` bytes, after that its last `tail` bytes."""

    keep: int
    tail: int
    size: int = 0  # bytes read in all
    _data: bytearray = field(default_factory=bytearray)

    @property
    def whole(self) -> bool:
        return self.size <= self.keep

    @property
    def data(self) -> bytes:
        """All of it when `whole`, else its last `tail` bytes."""
        return bytes(self._data if self.whole else self._data[-self.tail:])

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._data += chunk
        if not self.whole and len(self._data) > 2 * self.tail:
            del self._data[:-self.tail]


def exchange(proc: subprocess.Popen[bytes], data: bytes, out: Capture, err: Capture,
             deadline: float, should_stop: Callable[[], bool]) -> str:
    """Write `data` to the command's input and read its output into `out` and `err`
    until it has exited (see the module docstring): "exited", or "timeout" at
    `deadline` (monotonic), or "stopped" once `should_stop()`; the pipes are closed
    either way, the command is left to the caller."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    stdin = proc.stdin.fileno()
    os.set_blocking(stdin, False)
    sent = 0
    exited_at = last_read = 0.0
    with selectors.DefaultSelector() as selector:
        for fd in captures:
            selector.register(fd, selectors.EVENT_READ)
        if data:
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        try:
            while selector.get_map():
                now = time.monotonic()
                if not exited_at and proc.poll() is not None:
                    exited_at = last_read = now
                    _close_input(proc, selector)
                if exited_at and (now - last_read >= EXIT_QUIET
                                  or now - exited_at >= EXIT_READ_MAX):
                    break
                if now >= deadline:
                    return "timeout"
                if should_stop():
                    return "stopped"
                wait = EXIT_QUIET if exited_at else POLL
                for key, _ in selector.select(max(0.0, min(wait, deadline - now))):
                    if key.fd == stdin:
                        sent = _send(proc, selector, data, sent)
                        continue
                    chunk = os.read(key.fd, CHUNK)
                    if chunk:
                        captures[key.fd].add(chunk)
                        last_read = time.monotonic()
                    else:
                        selector.unregister(key.fd)
        finally:
            _close_input(proc, selector)
            for stream in (proc.stdout, proc.stderr):
                stream.close()
    return _wait_for_exit(proc, deadline, should_stop)


def _send(proc: subprocess.Popen[bytes], selector: selectors.BaseSelector, data: bytes,
          sent: int) -> int:
    """Write the next part of `data`; close the input once all is sent (or unread)."""
    try:
        assert proc.stdin is not None
        sent += os.write(proc.stdin.fileno(), memoryview(data)[sent:sent + CHUNK])
    except BlockingIOError:
        return sent
    except (BrokenPipeError, OSError):  # the command does not read its input: fine
        sent = len(data)
    if sent >= len(data):
        _close_input(proc, selector)
    return sent


def _close_input(proc: subprocess.Popen[bytes], selector: selectors.BaseSelector) -> None:
    assert proc.stdin is not None
    if proc.stdin.closed:
        return
    with contextlib.suppress(KeyError, ValueError):
        selector.unregister(proc.stdin)
    with contextlib.suppress(OSError):  # a broken pipe: nothing more to say
        proc.stdin.close()


def _wait_for_exit(proc: subprocess.Popen[bytes], deadline: float,
                   should_stop: Callable[[], bool]) -> str:
    """The command closed its output and may still run: wait for its exit."""
    while True:
        try:
            proc.wait(timeout=max(0.0, min(POLL, deadline - time.monotonic())))
            return "exited"
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return "timeout"
            if should_stop():
                return "stopped"

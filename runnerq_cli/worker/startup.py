"""Signals during a worker process's start-up: recorded from its first moment, obeyed later.

Starting `runnerq-mongo worker` imports typer, pymongo and the handlers' modules
and connects before the engine runs and installs its own signal handlers. A
SIGTERM (or SIGINT) in that time used to kill the process the default way
(exit 143, no log line). `install_if_worker` runs first thing in the
entry point (`runnerq_cli.__main__`), before anything heavy is imported: for
the worker command it installs handlers that only record the signal. The
engine takes the record over when it installs its own handlers
(`take_over`) and obeys it: one signal stops it cleanly (exit 0, "worker
stopped" logged), a second stops it at once, as documented.

SIGINT is handled even if the process inherited it ignored (as anything started
with `&` from a non-interactive shell does): an operator's Ctrl-C or `kill -INT`
must stop a worker.

And after the engine: it puts back the recording handlers (not the default
disposition), and once the command knows its exit code (`exit_on_signal`) a stop
signal ends the process at once with that code. A second SIGTERM 50 ms after
"worker stopped exit_code=0" was logged used to kill the exiting process the
default way (exit 143), though everything was done.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

from runnerq_cli.argv import command_word

COMMAND = "worker"
SIGNALS = (signal.SIGTERM, signal.SIGINT)

_received: list[int] = []
_originals: dict[int, Any] = {}


def _record(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)


def install_if_worker(argv: Sequence[str]) -> bool:
    """For the worker command, record SIGTERM/SIGINT from now on; True if installed."""
    if command_word(argv) != COMMAND or _originals:
        return False
    for signum in SIGNALS:
        _originals[signum] = signal.signal(signum, _record)
    return True


def take_over() -> list[int]:
    """For the engine, once its own handlers are installed: the signals received
    during start-up (empty when nothing was installed early). What the engine puts
    back when it is done are the recording handlers: a signal while the process
    exits changes nothing (see `exit_on_signal`)."""
    received = list(_received)
    _received.clear()
    return received


def exit_on_signal(code: int) -> None:
    """The worker command is done and exits with `code`: from now on a stop signal
    ends the process at once with that code (what is left is the interpreter's
    shutdown; nothing to stop gracefully)."""
    if not _originals:
        return

    def leave(signum: int, frame: FrameType | None) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # the interrupted code may hold its lock
                stream.flush()
        os._exit(code)

    for signum in SIGNALS:
        signal.signal(signum, leave)


def received() -> int:
    """How many stop signals arrived during start-up so far."""
    return len(_received)


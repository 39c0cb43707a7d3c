"""A path where a command writes a file (`tail --cursor-file`, `dev-server --path`):
checked before anything runs, so a command never hangs on a FIFO or fails at its end.

Apart from values.py, whose parsers every command runs, since a plain `enqueue` writes
no file: it need not compile this where byte-code is not cached
(benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

import os

from runnerq_cli.errors import InvalidArgument
from runnerq_cli.values import shown


def writable_file(value: str, what: str) -> str:
    """A path where a regular file can be created or replaced (its directory exists, is
    writable); returns the path to write, a symlink's target (written through: replacing
    the link itself would leave its target stale and the link gone).

    An existing FIFO, socket or device is refused: opening one blocks or reads nothing
    a cursor could be made of, so the command would hang instead of answering.
    """
    import stat

    if not value:
        raise InvalidArgument(f"{what}: the path must not be empty")
    value = os.path.realpath(value)
    if os.path.exists(value) and not os.path.isdir(value) \
            and not stat.S_ISREG(os.stat(value).st_mode):
        raise InvalidArgument(f"{what}: {shown(value)} is not a regular file (a FIFO, "
                              "socket or device)")
    if os.path.isdir(value):
        raise InvalidArgument(f"{what}: {shown(value)} is a directory, not a file")
    parent = os.path.dirname(os.path.abspath(value))
    if not os.path.exists(parent):
        raise InvalidArgument(f"{what}: the directory of {shown(value)} does not exist")
    if not os.path.isdir(parent):
        raise InvalidArgument(f"{what}: {shown(value)} is under a file, not a directory")
    if os.path.exists(value) and not os.access(value, os.W_OK):
        raise InvalidArgument(f"{what}: {shown(value)} is not writable")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidArgument(f"{what}: cannot create files in the directory of "
                              f"{shown(value)} (permission denied)")
    return value

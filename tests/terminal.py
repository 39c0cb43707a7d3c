"""Run the CLI on a pseudo-terminal of a given size, as a person at a terminal does."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterable

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>]")


def on_terminal(env: dict[str, str], *args: str, columns: int = 80, rows: int = 24,
                timeout: float = 60, raw: bool = False,
                piped: Iterable[bytes] | None = None) -> tuple[int, str]:
    """(exit code, what the terminal showed, escape sequences removed unless `raw`).
    `piped`: standard input is a pipe each piece is written to as it comes (a generator
    can pause like a producer), then closed."""
    import threading

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    run_env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], env=run_env,
                            stdin=slave if piped is None else subprocess.PIPE, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    if piped is not None:
        def feed(pipe=proc.stdin, pieces=piped) -> None:
            with pipe:
                for piece in pieces:
                    pipe.write(piece)
                    pipe.flush()
        threading.Thread(target=feed, daemon=True).start()
    seen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = seen.decode(errors="replace").replace("\r", "")
    return code, text if raw else ANSI.sub("", text)

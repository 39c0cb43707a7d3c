"""The server a benchmark measures against: RUNNERQ_BENCH_MONGO_URI, else a dev server.

The dev server runs in a process of its own, so its CPU is never counted as
the benchmark's client CPU.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

DEV_SERVER = ("import time\nfrom runnerq_cli.cli.devserver import start_in_thread\n"
              "s = start_in_thread()\nprint(s.uri, flush=True)\ntime.sleep(10**9)\n")


def start_server() -> tuple[str, subprocess.Popen[str] | None]:
    """(URI, the dev server's process or None): stop the process when done."""
    uri = os.environ.get("RUNNERQ_BENCH_MONGO_URI")
    if uri:
        return uri, None
    proc = subprocess.Popen([sys.executable, "-c", DEV_SERVER], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    return proc.stdout.readline().strip(), proc


@contextlib.contextmanager
def bench_queue(prefix: str) -> Iterator[dict[str, str]]:
    """The environment of CLI runs on a fresh benchmark database (indexes made) of the
    server above, which is stopped at the end."""
    uri, server = start_server()
    env = {**os.environ, "RUNNERQ_MONGO_URI": uri,
           "RUNNERQ_DATABASE": f"{prefix}_{uuid.uuid4().hex[:8]}",
           "RUNNERQ_QUEUE": "bench", "RUNNERQ_CONFIG": "", "RUNNERQ_CONNECT_TIMEOUT": "30s"}
    try:
        subprocess.run([sys.executable, "-m", "runnerq_cli", "init-indexes"], env=env,
                       check=True, capture_output=True)
        yield env
    finally:
        if server is not None:
            server.kill()

"""The server a benchmark measures against: RUNNERQ_BENCH_MONGO_URI, else a dev server.

The dev server runs in a process of its own, so its CPU is never counted as
the benchmark's client CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

DEV_SERVER = ("import time\nfrom runnerq_cli.devserver import start_in_thread\n"
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

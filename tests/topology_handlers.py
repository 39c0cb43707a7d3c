"""The handler of the topology proofs (tests/test_topology.py): each run of an attempt
appends one line to the history file TOPOLOGY_HISTORY_FILE (`claim ID ATTEMPT PID`),
a whole line per write (O_APPEND), so workers of several processes share one file."""

from __future__ import annotations

import os
import time

from runnerq_cli.worker.handlers import HandlerRegistry

registry = HandlerRegistry()


@registry.handler("record")
def record(payload, ctx):
    line = f"claim {ctx.activity_id} {ctx.attempt} {os.getpid()}\n".encode()
    fd = os.open(os.environ["TOPOLOGY_HISTORY_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    time.sleep(float(payload.get("seconds", 0.02)))
    return {"n": payload.get("n")}

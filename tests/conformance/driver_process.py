"""A conformance driver in a process of its own, as RunnerQ's runner starts one:
`python -m runnerq_cli.conformance`, one JSON request a line in, one reply a line out."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from typing import Any


class DriverProcess:
    """One driver; `call` sends a request and returns the reply's `ok` or `error`."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli.conformance"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.stderr, env=env, bufsize=0)

    def call(self, op: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """The reply, checked to be one JSON object of exactly `ok` or `error`."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps({"op": op, "args": args}) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"driver {self.name}: no reply to {op} in {timeout} s{self.log()}"
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), f"driver {self.name} ended: {line!r}{self.log()}"
        reply = json.loads(line)
        assert isinstance(reply, dict) and len(reply) == 1 and (
            set(reply) <= {"ok", "error"}), f"driver {self.name}: not a reply: {line!r}"
        if "error" in reply:
            error = reply["error"]
            assert set(error) == {"kind", "message"}, f"not an error reply: {line!r}"
        return reply

    def log(self) -> str:
        """The driver's standard error so far (shown with failures, as the spec's runner
        shows it)."""
        self.stderr.flush()
        self.stderr.seek(0)
        text = self.stderr.read()[-4000:]
        return f"\n{self.name} stderr:\n{text}" if text.strip() else ""

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()


def driver_env(xdg: str) -> dict[str, str]:
    """The environment of a driver: ours without RUNNERQ_* settings, a config home of its
    own, and the suite's connect timeout (the in-process test server may answer late)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    env.update(XDG_CONFIG_HOME=xdg, RUNNERQ_CONNECT_TIMEOUT="30s",
               RUNNERQ_SERVER_SELECTION_TIMEOUT="30s")
    return env

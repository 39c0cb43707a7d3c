"""Shell handlers: `--exec TYPE='command args'`, the way CI jobs plug in.

Contract (docs/workers.md: "Shell handlers"):
- The payload is written to the command's standard input as JSON; it never
  goes into the command line. RUNNERQ_ACTIVITY_ID, RUNNERQ_ACTIVITY_TYPE,
  RUNNERQ_ATTEMPT and RUNNERQ_WORKER_ID are set in its environment.
- The command is split with shlex and run without a shell; write
  `sh -c '...'` yourself if you want one.
- Exit 0 is success. Standard output is the result: empty means null, JSON is
  parsed, anything else becomes a string result (its last 16 KiB).
- Exit 100 (`EXIT_NON_RETRYABLE`) is a non-retryable failure; any other exit
  status, or death by a signal, is retryable. The last 2 KiB of standard
  error become `last_error`.
- At the activity's timeout, or when the worker gives the activity up, the
  command's whole process group gets SIGTERM, then SIGKILL 5 s later.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from typing import Any

from runnerq_cli.errors import InvalidArgument
from runnerq_cli.worker.handlers import (
    ActivityContext,
    Handler,
    HandlerTimeout,
    NonRetryableError,
    RetryableError,
)

EXIT_NON_RETRYABLE = 100
STDERR_TAIL = 2048
STDOUT_TEXT_TAIL = 16384
KILL_GRACE = 5.0
POLL = 0.2


class ShellFailure(RetryableError):
    """A retryable failure of a shell command (its exit status and stderr tail)."""


def _tail(data: bytes, limit: int) -> str:
    text = data[-limit:].decode("utf-8", errors="replace").strip()
    return ("…" + text) if len(data) > limit else text


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it if it lingers."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def parse_stdout(data: bytes) -> Any:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text[-STDOUT_TEXT_TAIL:]


class ShellCommand:
    """A callable handler that runs one command per activity."""

    def __init__(self, command: str) -> None:
        try:
            self.argv = shlex.split(command)
        except ValueError as exc:
            raise InvalidArgument(f"command {command!r}: {exc}") from None
        if not self.argv:
            raise InvalidArgument("an --exec command must not be empty")
        self.command = command

    def __call__(self, payload: dict[str, Any], ctx: ActivityContext) -> Any:
        env = {**os.environ, "RUNNERQ_ACTIVITY_ID": str(ctx.activity_id),
               "RUNNERQ_ACTIVITY_TYPE": ctx.activity_type, "RUNNERQ_ATTEMPT": str(ctx.attempt),
               "RUNNERQ_WORKER_ID": ctx.worker_id}
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True)
        except FileNotFoundError:
            raise NonRetryableError(f"command not found: {self.argv[0]}") from None
        except PermissionError:
            raise NonRetryableError(f"command not executable: {self.argv[0]}") from None
        data = json.dumps(payload).encode()
        import time

        deadline = time.monotonic() + ctx.timeout_seconds
        stdout = stderr = b""
        pending_input: bytes | None = data
        while True:
            wait = min(POLL, max(0.0, deadline - time.monotonic()))
            try:
                stdout, stderr = proc.communicate(input=pending_input, timeout=wait)
                break
            except subprocess.TimeoutExpired:
                pending_input = None  # communicate() keeps what it has sent so far
                if time.monotonic() >= deadline:
                    _kill_group(proc)
                    raise HandlerTimeout(
                        f"timed out after {ctx.timeout_seconds:g}s: command killed") from None
                if ctx.should_stop:
                    _kill_group(proc)
                    raise ShellFailure("command stopped: the worker gave the activity up"
                                       ) from None
        code = proc.returncode
        if code == 0:
            return parse_stdout(stdout)
        tail = _tail(stderr, STDERR_TAIL)
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        message = f"{how}: {tail}" if tail else how
        if code == EXIT_NON_RETRYABLE:
            raise NonRetryableError(message)
        raise ShellFailure(message)


def shell_handler(activity_type: str, command: str) -> Handler:
    return Handler(activity_type, ShellCommand(command), is_async=False, takes_context=True,
                   kind="shell", source=f"exec: {command}")

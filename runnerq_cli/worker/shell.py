"""Shell handlers: `--exec TYPE='command args'`, the way CI jobs plug in.

Contract (docs/workers.md: "Shell handlers"):
- The payload is written to the command's standard input as JSON; it never
  goes into the command line.
- Environment: the worker's own, minus its secrets (`handler_environment`):
  no RUNNERQ_* variable of the worker's (RUNNERQ_MONGO_URI, RUNNERQ_CONFIG,
  ...) and no variable whose value holds the connection string or its
  password; plus exactly the RUNNERQ_* variables of `HANDLER_VARIABLES`.
- The command is split with shlex and run without a shell; write
  `sh -c '...'` yourself if you want one. So a first word holding `=`
  (`--exec 'a=b=cat'`: type `a`, command `b=cat`) is refused: without a shell,
  `VAR=value` is no assignment, and no program is named so; and so is shell syntax
  outside quotes (`sleep 2; cat`, `a | b`: `shell_syntax`), which would reach the
  program as its arguments.
- Exit 0 is success. Standard output is the result: empty means null, JSON is
  parsed, anything else becomes a string result (its last 16 KiB). Output
  longer than 16 MiB (twice a result's bound) is not kept: only its last
  16 KiB are, and they are the string result (pipes.py: bounded memory).
- The command's own exit ends the attempt: output still arriving afterwards
  (from a process it started that holds its output open) is read for at most
  1 s more; such processes are neither waited for nor stopped.
- Exit 100 (`EXIT_NON_RETRYABLE`) is a non-retryable failure; any other exit
  status, or death by a signal, is retryable. The last 2 KiB of standard
  error become `last_error`.
- At the activity's timeout, when the worker gives the activity up, or when an
  operator cancels it (the worker notices at its next renewal), the command's whole
  process group gets SIGTERM, then SIGKILL `worker.kill_grace` (5 s) later.
- If the worker dies without cleaning up (SIGKILL, OOM killer), the command
  gets SIGKILL from the kernel on Linux (a parent-death signal, set between
  fork and exec). Not covered: processes the command started itself (a
  command that forks should `exec` its last step or watch its parent), and
  other platforms (macOS, BSD: the command runs on, to its own end or timeout).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote

from runnerq_cli.backend.domain import tracecontext
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.literal import literal
from runnerq_cli.worker.handlers import (
    ActivityContext,
    Handler,
    HandlerTimeout,
    NonRetryableError,
    RetryableError,
)
from runnerq_cli.worker.pipes import OUTPUT_MAX_BYTES, Capture, exchange

EXIT_NON_RETRYABLE = 100
STDERR_TAIL = 2048
STDOUT_TEXT_TAIL = 16384
KILL_GRACE = 5.0
# What a handler's environment holds of RunnerQ: these, and no other RUNNERQ_* variable.
HANDLER_VARIABLES = ("RUNNERQ_ACTIVITY_ID", "RUNNERQ_ACTIVITY_TYPE", "RUNNERQ_ATTEMPT",
                     "RUNNERQ_WORKER_ID", "RUNNERQ_QUEUE")
# A password shorter than this is not looked for inside other variables' values: it
# would match innocent ones (PATH, HOME) and leave the command without them.
MIN_SECRET_LENGTH = 4
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ShellFailure(RetryableError):
    """A retryable failure of a shell command (its exit status and stderr tail)."""


def _tail(data: bytes, limit: int, cut: bool) -> str:
    """The last `limit` bytes as text, marked "…" when more came before them (`cut`)."""
    text = data[-limit:].decode("utf-8", errors="replace").strip()
    return ("…" + text) if cut else text


def _kill_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE) -> None:
    """SIGTERM the process group, SIGKILL it if it lingers `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def uri_secrets(uri: str) -> set[str]:
    """The texts of `uri` a handler must not see: the URI itself and its passwords
    (in the user info and in password-like query options), raw and percent-decoded."""
    from runnerq_cli.redaction import secrets_in

    found = {uri} if uri else set()
    for secret in secrets_in(uri):
        found.update({secret, unquote(secret)})
    return {s for s in found if len(s) >= MIN_SECRET_LENGTH}


def handler_environment(ctx: ActivityContext, *, queue: str | None = None,
                        secrets: Iterable[str] = (),
                        base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a shell handler runs with: `base` (the worker's) without its
    RUNNERQ_* settings and without any variable holding a secret, plus
    `HANDLER_VARIABLES`. The secrets are `secrets` (the connection strings the
    worker was given) and RUNNERQ_MONGO_URI's, whatever the worker connected with."""
    base = os.environ if base is None else base
    hidden: set[str] = set()
    for uri in (*secrets, base.get("RUNNERQ_MONGO_URI", "")):
        hidden |= uri_secrets(uri)
    env = {key: value for key, value in base.items()
           if not key.upper().startswith("RUNNERQ_")
           and not any(secret in value for secret in hidden)}
    env.update(RUNNERQ_ACTIVITY_ID=str(ctx.activity_id), RUNNERQ_ACTIVITY_TYPE=ctx.activity_type,
               RUNNERQ_ATTEMPT=str(ctx.attempt), RUNNERQ_WORKER_ID=ctx.worker_id)
    if queue:
        env["RUNNERQ_QUEUE"] = queue
    # Traced, the command continues the attempt's trace: TRACEPARENT/TRACESTATE are the
    # attempt's span (docs/workers.md, "Tracing"), so a `runnerq-mongo enqueue` it runs
    # stays in the trace. Nothing is imported when the process does not trace.
    traced = tracecontext.current()
    if traced is not None:
        env.pop("TRACESTATE", None)
        env.update({key.upper(): value for key, value in traced.items()})
    return env


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child killed when the worker dies (Linux), or None.

    Everything is prepared here, in the parent: between fork and exec (where the
    returned function runs, in a process with threads) it only makes three calls.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    import ctypes

    parent = os.getpid()
    args = (ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
            ctypes.c_ulong(0), ctypes.c_ulong(0))

    def preexec() -> None:
        prctl(*args)
        if os.getppid() != parent:  # the worker died before prctl: no signal would come
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def parse_stdout(data: bytes) -> Any:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text[-STDOUT_TEXT_TAIL:]


# Words that only a shell reads: given to a program as arguments they are a mistake
# (`--exec x='sleep 2; cat'` runs `sleep` with `2;` and `cat`, failing every attempt).
SHELL_OPERATORS = frozenset({"|", "||", "&&", "&", ";", ";;", ">", ">>", "<", "<<",
                             "2>", "2>>", "&>", "2>&1", "|&"})


def shell_syntax(command: str) -> str | None:
    """The first unquoted word of `command` that is a shell operator (`|`, `&&`, `;`,
    `>`, ...) or ends in an unescaped `;` (`2;`), else None. Quoted (`tr '|' ,`) or
    escaped (`find . -exec rm {} \\;`) words are arguments, not syntax."""
    try:
        words = shlex.split(command, posix=False)
    except ValueError:
        return None
    for word in words:
        if word[:1] in ("'", '"'):
            continue
        if word in SHELL_OPERATORS or (
                len(word) > 1 and word.endswith(";") and not word.endswith("\\;")):
            return word
    return None


class ShellCommand:
    """A callable handler that runs one command per activity."""

    def __init__(self, command: str, *, queue: str | None = None,
                 secrets: Iterable[str] = ()) -> None:
        self.queue = queue
        self.secrets = tuple(secrets)
        try:
            self.argv = shlex.split(command)
        except ValueError as exc:
            raise InvalidArgument(f"command {command!r}: {exc}") from None
        if not self.argv:
            raise InvalidArgument("a shell command must not be empty", "command")
        if "=" in self.argv[0]:
            raise InvalidArgument(
                f"command '{literal(command, max_length=200)}': its first word "
                f"'{literal(self.argv[0], max_length=100)}' holds '=': commands run without "
                "a shell, where VAR=value is no assignment (the type is the text before "
                "the first '='); use 'env VAR=value COMMAND' or 'sh -c ...'", "command")
        syntax = shell_syntax(command)
        if syntax is not None:
            raise InvalidArgument(
                f"command '{literal(command, max_length=200)}': "
                f"'{literal(syntax, max_length=40)}' is shell syntax, but commands run "
                "without a shell (it would reach the program as an argument); write "
                "sh -c '...' to have one", "command")
        self.command = command

    def __call__(self, payload: dict[str, Any], ctx: ActivityContext) -> Any:
        env = handler_environment(ctx, queue=self.queue, secrets=self.secrets)
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True,
                                    preexec_fn=_die_with_parent())
        except FileNotFoundError:
            raise NonRetryableError(f"command not found: {self.argv[0]}") from None
        except PermissionError:
            raise NonRetryableError(f"command not executable: {self.argv[0]}") from None
        import time

        out, err = Capture(OUTPUT_MAX_BYTES, STDOUT_TEXT_TAIL), Capture(STDERR_TAIL, STDERR_TAIL)
        ended = exchange(proc, json.dumps(payload).encode(), out, err,
                         time.monotonic() + ctx.timeout_seconds, lambda: ctx.should_stop)
        if ended == "timeout":
            _kill_group(proc, ctx.kill_grace)
            raise HandlerTimeout(f"timed out after {ctx.timeout_seconds:g}s: command killed")
        if ended == "stopped":
            _kill_group(proc, ctx.kill_grace)
            if ctx.cancelled:
                raise ShellFailure("command stopped: the activity was cancelled")
            raise ShellFailure("command stopped: the worker gave the activity up")
        code = proc.returncode
        if code == 0:
            # Output longer than any result can be: not parsed, its end is the result.
            return parse_stdout(out.data) if out.whole else _tail(out.data, STDOUT_TEXT_TAIL,
                                                                  cut=True)
        tail = _tail(err.data, STDERR_TAIL, cut=not err.whole)
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        message = f"{how}: {tail}" if tail else how
        if code == EXIT_NON_RETRYABLE:
            raise NonRetryableError(message)
        raise ShellFailure(message)


def shell_handler(activity_type: str, command: str, *, queue: str | None = None,
                  secrets: Iterable[str] = ()) -> Handler:
    """A handler running `command`; `queue` is passed on as RUNNERQ_QUEUE, and the
    `secrets` (connection strings) are kept out of its environment."""
    return Handler(activity_type, ShellCommand(command, queue=queue, secrets=secrets),
                   is_async=False, takes_context=True, kind="shell", source=f"exec: {command}")

"""The driver protocol: one JSON request a line in, one JSON reply a line out.

`{"op": "claim", "args": {...}}` is answered `{"ok": {...}}` or `{"error": {"kind",
"message"}}`, `kind` being one of the spec's storage error kinds
(`constants/constants.json`, `storage_error_kind`), mapped from our errors below.
A line that is no request (not JSON, no `op`, an unknown op) is answered with an error
line too, and the driver reads on; it ends at the end of its input.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import IO, Any

from runnerq_cli import errors
from runnerq_cli.conformance import durable_ops
from runnerq_cli.conformance.args import Args, Unsupported
from runnerq_cli.conformance.session import Session

# Our errors as the spec's storage error kinds; the first class an error is an
# instance of decides (subclasses before their bases).
ERROR_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (errors.ClaimLost, "claim_lost"),
    (errors.CheckpointConflict, "checkpoint_conflict"),
    (errors.NotFound, "not_found"),
    (errors.DuplicateActivity, "duplicate_activity"),
    (errors.IdempotencyConflict, "idempotency_conflict"),
    (Unsupported, "unsupported"),
    (errors.InvalidArgument, "invalid_argument"),
    (errors.ConfigError, "configuration"),
    (errors.TimedOut, "timeout"),
    (errors.CommandTimedOut, "timeout"),
    (errors.Unavailable, "unavailable"),
    (errors.DuplicateKey, "conflict"),
    (errors.AlreadyExists, "conflict"),
    (errors.WrongState, "conflict"),
    (errors.WriteRefused, "invalid_argument"),
)

Operation = Callable[[Args], dict[str, Any]]


def operations(session: Session) -> dict[str, Operation]:
    """Every op of the protocol, by name."""
    def bound(fn: Callable[[Session, Args], dict[str, Any]]) -> Operation:
        return lambda args: fn(session, args)

    return {
        "open": session.open, "submit": session.submit, "claim": session.claim,
        "renew": session.renew, "complete": session.complete, "fail": session.fail,
        "lookup_key": session.lookup_key, "reap": session.reap, "cleanup": session.cleanup,
        "get_result": session.get_result,
        "checkpoint": bound(durable_ops.checkpoint),
        "register_dependency": bound(durable_ops.register_dependency),
        "park": bound(durable_ops.park), "signal": bound(durable_ops.signal),
    }


def error_kind(exc: BaseException) -> str:
    for cls, kind in ERROR_KINDS:
        if isinstance(exc, cls):
            return kind
    return "internal"


def answer(ops: dict[str, Operation], line: str) -> dict[str, Any]:
    """The reply to one request line; never raises."""
    try:
        request = json.loads(line)
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            raise errors.InvalidArgument('a request is {"op": NAME, "args": {...}}')
        op = ops.get(request["op"])
        if op is None:
            raise Unsupported(f"unknown op {request['op']!r:.60}")
        return {"ok": op(Args(request.get("args")))}
    except json.JSONDecodeError as exc:
        return _error("invalid_argument", f"not JSON: {exc}")
    except errors.RunnerQError as exc:
        kind = error_kind(exc)
        if kind == "internal":
            traceback.print_exc(file=sys.stderr)
        return _error(kind, str(exc))
    except Exception as exc:  # a bug of ours: said on stderr, answered, never fatal
        traceback.print_exc(file=sys.stderr)
        return _error("internal", f"{type(exc).__name__}: {exc}")


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"kind": kind, "message": message}}


def serve(lines: IO[str], out: IO[str]) -> None:
    """Answer every line of `lines` on `out`, one reply a line, flushed at once."""
    ops = operations(Session())
    for line in lines:
        if not line.strip():
            continue
        out.write(json.dumps(answer(ops, line), default=str, separators=(",", ":")) + "\n")
        out.flush()


def main() -> int:
    """Serve standard input; whatever else would print goes to standard error, so
    standard output holds replies alone."""
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        serve(sys.stdin, out)
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout = out
    return 0

"""Handlers used by the worker tests (importable as tests.worker_handlers)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from runnerq_cli.worker.handlers import HandlerRegistry, NonRetryableError

registry = HandlerRegistry()


@registry.handler("echo")
def echo(payload, ctx):
    return {"echo": payload, "attempt": ctx.attempt, "type": ctx.activity_type,
            "id": str(ctx.activity_id), "metadata": ctx.metadata}


@registry.handler
def payload_only(payload):
    return payload.get("value")


@registry.handler("async_echo")
async def async_echo(payload, ctx):
    await asyncio.sleep(0.01)
    return {"async": True, "value": payload.get("value")}


@registry.handler("boom")
def boom(payload, ctx):
    raise RuntimeError(f"boom on attempt {ctx.attempt}")


@registry.handler("fatal")
def fatal(payload, ctx):
    raise NonRetryableError("bad input: cannot be retried")


@registry.handler("sleep")
def sleep(payload, ctx):
    time.sleep(float(payload.get("seconds", 1)))
    return {"slept": payload.get("seconds", 1)}


@registry.handler("async_sleep")
async def async_sleep(payload, ctx):
    await asyncio.sleep(float(payload.get("seconds", 1)))
    return {"slept": payload.get("seconds", 1)}


@registry.handler("spawn")
def spawn(payload, ctx):
    result = ctx.enqueue("echo", {"parent": str(ctx.activity_id)})
    return {"child": str(result.activity_id)}


@registry.handler("mark")
def mark(payload, ctx):
    """Record each run in a directory (one file per run): counts executions across processes."""
    directory = Path(payload["dir"])
    (directory / f"{ctx.activity_id}-{os.getpid()}-{time.monotonic_ns()}").write_text("x")
    time.sleep(float(payload.get("seconds", 0)))
    return {"pid": os.getpid()}


def noop(payload, ctx):
    return None


@registry.handler("slow_first")
def slow_first(payload, ctx):
    """Hangs on the first attempt (to be killed), quick afterwards (an event's wait, not
    `time.sleep`: see `mark_and_wait`)."""
    if ctx.attempt == 1:
        threading.Event().wait(60)
    return {"attempt": ctx.attempt}


@registry.handler("mark_and_wait")
def mark_and_wait(payload, ctx):
    """`mark`, waiting with an event instead of `time.sleep`: libfaketime with the
    monotonic clock left true (tests/test_clock_skew.py) makes `time.sleep` fail (EINVAL)."""
    directory = Path(payload["dir"])
    (directory / f"{ctx.activity_id}-{os.getpid()}-{time.monotonic_ns()}").write_text("x")
    threading.Event().wait(float(payload.get("seconds", 0)))
    return {"pid": os.getpid()}

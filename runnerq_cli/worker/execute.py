"""Running one attempt's handler and turning what it did into an outcome.

("ok", result), ("fatal", error) for a failure not worth retrying (the
handler said so, or its result can never be stored), ("retry", error) for any
other failure. `Abandoned` means the attempt was settled elsewhere (timed out,
claim lost, released) while an async handler ran: it has no outcome to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import traceback
from typing import TYPE_CHECKING, Any

from runnerq_cli import values
from runnerq_cli.worker.handlers import HandlerTimeout, NonRetryableError, RetryableError
from runnerq_cli.worker.logs import WORKER_LOGGER, details
from runnerq_cli.worker.outcomes import Outcome, brief

if TYPE_CHECKING:
    from runnerq_cli.worker.flights import Flight

log = logging.getLogger(WORKER_LOGGER)
RESULT_MAX_BYTES = 8 * 1024 * 1024  # the activity document (16 MiB max) carries it, payload too


class Abandoned(Exception):
    """The attempt was settled elsewhere (timeout, claim lost, released)."""


def call(flight: Flight) -> Outcome:
    """Run the handler: ("ok", result) | ("fatal", error) | ("retry", error)."""
    handler = flight.handler
    act = flight.claim.activity
    if handler is None:
        return "fatal", f"no handler for {act.activity_type}"
    try:
        args = (act.payload, flight.ctx) if handler.takes_context else (act.payload,)
        if handler.is_async:
            result = asyncio.run(_run_async(flight, handler.func(*args)))
        else:
            result = handler.func(*args)
    except Abandoned:
        raise
    except NonRetryableError as exc:
        return "fatal", str(exc) or type(exc).__name__
    except RetryableError as exc:  # HandlerTimeout, shell failures, or the user's
        return "retry", str(exc) or type(exc).__name__
    except BaseException as exc:  # SystemExit, CancelledError too: else the slot
        # thread dies and the claim is held, unsettled, until its timeout.
        log.debug("handler raised", extra=details(
            activity_id=str(act.id), traceback="".join(traceback.format_exception(exc))[-4000:]))
        return "retry", brief(exc)
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        return "fatal", f"result is not JSON-serialisable: {exc}"
    return storable(result)


async def _run_async(flight: Flight, coro: Any) -> Any:
    task = asyncio.ensure_future(coro)
    while True:
        remaining = flight.timeout_at - time.monotonic()
        done, _ = await asyncio.wait({task}, timeout=max(0.0, min(0.25, remaining)))
        if done:
            return task.result()
        if time.monotonic() >= flight.timeout_at or flight.ctx.should_stop:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            if flight.ctx.should_stop and time.monotonic() < flight.timeout_at:
                raise Abandoned()
            raise HandlerTimeout(f"timed out after {flight.ctx.timeout_seconds:g}s")


def storable(result: Any) -> Outcome:
    """("ok", result), or ("fatal", why) for a result MongoDB refuses (an int past 64 bits,
    too large, nested too deep): its acknowledgement could never succeed, and the reaper
    would rerun it."""
    import bson

    if values.nested_deeper_than({"data": result}):
        return "fatal", (f"result cannot be stored in MongoDB: nested deeper than "
                         f"{values.JSON_MAX_DEPTH} levels")
    try:
        size = len(bson.encode({"data": result}))
    except (bson.errors.InvalidDocument, OverflowError, TypeError, ValueError) as exc:
        return "fatal", f"result cannot be stored in MongoDB: {brief(exc)}"
    if size > RESULT_MAX_BYTES:
        return "fatal", (f"result cannot be stored in MongoDB: {size} bytes, more than "
                         f"{RESULT_MAX_BYTES} (it travels in the activity document)")
    return "ok", result

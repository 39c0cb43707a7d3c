"""Running one attempt's handler and turning what it did into an outcome.

("ok", result), ("fatal", error) for a failure not worth retrying (the
handler said so), ("retry", error) for any other failure. `Abandoned` means the
attempt was settled elsewhere (timed out, claim lost, released) while an async
handler ran: it has no outcome to write.

An `async def` handler runs on an event loop of its own per attempt (`asyncio.run` in
its slot thread), or, given `loop` (the asyncio worker, runnerq_cli/aio/worker.py), on
that loop: the slot thread then only waits for it, so the attempt keeps its slot, its
lease renewals and its timeout exactly as on a loop of its own.

Whatever the handler raises (any BaseException, with a message that is huge or
whose `__str__` raises or returns no string) ends as a failure with a bounded text
(backend/domain/error_text.py); `call` itself never raises anything else. Whether a
result can be stored (JSON, finite numbers, at most RESULT_MAX_BYTES) is decided
where it is written (backend/domain/results.py): a result that cannot be is recorded
as a non-retryable failure saying why (outcomes.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
import traceback
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.error_text import describe, error_text
from runnerq_cli.worker.durable import Suspended
from runnerq_cli.worker.durable_context import broken, parked
from runnerq_cli.worker.handlers import HandlerTimeout, NonRetryableError, RetryableError
from runnerq_cli.worker.logs import WORKER_LOGGER, details
from runnerq_cli.worker.outcomes import PARKED, Outcome

if TYPE_CHECKING:
    from runnerq_cli.worker.flights import Flight

log = logging.getLogger(WORKER_LOGGER)


class Abandoned(Exception):
    """The attempt was settled elsewhere (timeout, claim lost, released)."""


def call(flight: Flight, loop: asyncio.AbstractEventLoop | None = None) -> Outcome:
    """Run the handler: ("ok", result) | ("fatal", error) | ("retry", error), or
    PARKED for a durable handler that parked; an `async def` one on `loop` if given,
    else on a loop of its own."""
    kind, value = _call(flight, loop)
    return _durably(flight, kind, value)


def _call(flight: Flight, loop: asyncio.AbstractEventLoop | None) -> Outcome:
    handler = flight.handler
    act = flight.claim.activity
    if handler is None:
        flight.fault = "handler_not_found"
        return "fatal", error_text(f"no handler for {act.activity_type}")
    try:
        args = (act.payload, flight.ctx) if handler.takes_context else (act.payload,)
        if handler.is_async:
            if loop is not None:
                return "ok", _on_loop(loop, _run_async(flight, handler.func(*args)))
            return "ok", asyncio.run(_run_async(flight, handler.func(*args)))
        return "ok", handler.func(*args)
    except Abandoned:
        raise
    except Suspended:
        return PARKED, None
    except NonRetryableError as exc:
        return "fatal", describe(exc, with_class=False)
    except RetryableError as exc:  # HandlerTimeout, shell failures, or the user's
        if isinstance(exc, HandlerTimeout):
            flight.fault = "timeout"
        return "retry", describe(exc, with_class=False)
    except BaseException as exc:  # SystemExit, CancelledError too: else the slot
        # thread dies and the claim is held, unsettled, until its timeout.
        flight.fault = "panic"  # RunnerQ's word: neither failure the handler chose
        if log.isEnabledFor(logging.DEBUG):
            log.debug("handler raised", extra=details(
                activity_id=str(act.id), traceback=_traceback(exc)))
        return "retry", describe(exc)


def _durably(flight: Flight, kind: str, value: Any) -> Outcome:
    """The outcome, unless the handler parked (the claim is over: nothing to write) or
    broke the replay contract, even where it caught what was raised (worker/durable.py)."""
    if parked(flight.ctx):
        return PARKED, None
    contract = broken(flight.ctx)
    if contract is not None:
        return "fatal", error_text(contract)
    return kind, value


def _traceback(exc: BaseException) -> str:
    """The end of the exception's traceback, or why it could not be formatted."""
    try:
        return error_text("".join(traceback.format_exception(exc))[-4000:])
    except BaseException as failed:
        return f"(the traceback could not be formatted: {describe(failed)})"


LOOP_CHECK = 0.5  # seconds between looks at whether the application's loop still runs


def _on_loop(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    """Run `coro` on the application's `loop` and wait for it in this slot thread.

    A loop that stops (or closes) before the coroutine ends fails the attempt (a
    retryable failure) rather than hold the slot and the claim for ever."""
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    while True:
        done, _ = concurrent.futures.wait([future], timeout=LOOP_CHECK)
        if done:
            return future.result()
        if loop.is_closed() or not loop.is_running():
            future.cancel()
            raise RuntimeError("the event loop running async handlers stopped")


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

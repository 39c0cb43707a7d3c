"""The handler's durable API: `ctx.step`, `ctx.sleep`, `ctx.wait_for_signal`,
`ctx.spawn`, `ctx.wait`, `ctx.wait_all`, and their `*_async` forms for `async def`
handlers (the same pattern as `ctx.enqueue` / `ctx.enqueue_async`).

Every worker's context is a `DurableContext`; the replay itself (what is read, stored
and when an attempt parks) is durable.py's `Replay`. The async forms run the storage's
round trips on a thread (`asyncio.to_thread`) and wait in process with `asyncio.sleep`,
so the loop runs on; the contract checks (a wait already in progress, a call inside a
step) run on the loop first, so `asyncio.gather` of two waits is refused at once.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runnerq_cli.errors import InvalidArgument
from runnerq_cli.worker.durable import _IN_STEP, ChildHandle, Replay
from runnerq_cli.worker.handlers import ActivityContext, NonRetryableError

__all__ = ["DurableContext"]


@dataclass
class DurableContext(ActivityContext):
    """An `ActivityContext` with the durable primitives (docs/workers.md, "Durable
    handlers"). Names are the keys of what is stored: stable across runs and unique
    within a handler."""

    _replay: Replay | None = field(repr=False, default=None)

    @property
    def replay(self) -> Replay:
        if self._replay is None:
            raise InvalidArgument("durable calls need a worker connected to a queue that "
                                  "has durable storage")
        return self._replay

    # ---------------------------------------------------------------- sync

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """`fn()`'s value, stored once under `name` and answered on every replay without
        running `fn` again. A NonRetryableError from `fn` is stored too and raised again
        (StepFailed) on replays; any other error stores nothing (the attempt retries)."""
        return self.replay.step(name, fn)

    def sleep(self, name: str, seconds: float) -> None:
        """Sleep until `seconds` after this sleep was first reached. A wait that fits the
        attempt's timeout is waited here; a longer one parks the activity (the worker's
        slot is freed, no attempt is counted) and the handler replays when it is due."""
        self.replay.sleep(name, seconds)

    def wait_for_signal(self, name: str, timeout: float | None = None) -> Any:
        """The payload of the signal `name` (one sent before the wait counts). Parks until
        it comes; past `timeout` seconds from the first arrival (None: no deadline) raises
        SignalTimeout, a non-retryable error."""
        return self.replay.wait_for_signal(name, timeout)

    def spawn(self, activity_type: str, payload: Mapping[str, Any] | None = None, *,
              step: str, **options: Any) -> ChildHandle:
        """Enqueue a child activity keyed by `step`: a replay re-attaches to the child its
        earlier run spawned. `options`: priority, delay_seconds, scheduled_at, max_retries,
        timeout_seconds, retry_delay_seconds, metadata."""
        return self.replay.spawn(activity_type, payload, step, options)

    def wait(self, handle: ChildHandle) -> Any:
        """The child's value; ChildFailed if it ended without one."""
        return self.replay.wait_all([handle])[0]

    def wait_all(self, handles: Sequence[ChildHandle]) -> list[Any]:
        """Every child's value, in order: waited here for about 2 s, then parked until
        they are all there. The first child (in order) that failed raises ChildFailed."""
        return self.replay.wait_all(list(handles))

    # --------------------------------------------------------------- async

    async def step_async(self, name: str, fn: Callable[[], Any]) -> Any:
        """`step` for an `async def` handler; `fn` may be a coroutine function."""
        replay = self.replay
        checked, cid, found = await asyncio.to_thread(replay.step_lookup, name)
        if found is not None:
            return replay.replayed(checked, found)
        token = _IN_STEP.set(checked)
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
        except NonRetryableError as exc:
            if replay.broken is None:
                await asyncio.to_thread(replay.step_failed, checked, cid, exc)
            raise
        finally:
            _IN_STEP.reset(token)
        return await asyncio.to_thread(replay.step_done, checked, cid, value)

    async def sleep_async(self, name: str, seconds: float) -> None:
        """`sleep` for an `async def` handler: an in-process wait is an asyncio.sleep."""
        replay = self.replay
        replay.enter("sleep", None, name, "sleep name")  # the checks, on the loop
        replay.begin_wait("sleep")
        try:
            left = await asyncio.to_thread(replay.sleep_plan, name, seconds)
            if left > 0:
                await asyncio.sleep(left)
        finally:
            replay.end_wait()

    async def wait_for_signal_async(self, name: str, timeout: float | None = None) -> Any:
        """`wait_for_signal` for an `async def` handler."""
        replay = self.replay
        replay.enter("wait_for_signal", None, name, "signal name")
        replay.begin_wait("wait_for_signal_async")
        try:
            return await asyncio.to_thread(replay.wait_for_signal, name, timeout, True)
        finally:
            replay.end_wait()

    async def spawn_async(self, activity_type: str, payload: Mapping[str, Any] | None = None,
                          *, step: str, **options: Any) -> ChildHandle:
        """`spawn` for an `async def` handler."""
        self.replay.enter("spawn", None, step, "spawn step")
        return await asyncio.to_thread(self.replay.spawn, activity_type, payload, step,
                                       options)

    async def wait_async(self, handle: ChildHandle) -> Any:
        """`wait` for an `async def` handler."""
        return (await self.wait_all_async([handle]))[0]

    async def wait_all_async(self, handles: Sequence[ChildHandle]) -> list[Any]:
        """`wait_all` for an `async def` handler: polls with asyncio.sleep."""
        replay = self.replay
        wanted = list(handles)
        replay.begin_wait("wait_all_async")
        try:
            missing = await asyncio.to_thread(replay.children_plan, wanted)
            until = time.monotonic() + replay.in_process_for()
            while missing and time.monotonic() < until and not self.should_stop:
                await asyncio.sleep(0.1)
                missing = await asyncio.to_thread(replay.children_plan, missing)
            if missing:
                await asyncio.to_thread(replay.park_on, missing)
            return await asyncio.to_thread(replay.collect, wanted)
        finally:
            replay.end_wait()


def parked(ctx: ActivityContext) -> bool:
    """Whether this attempt parked (its claim is over: no outcome to write)."""
    replay = getattr(ctx, "_replay", None)
    return isinstance(replay, Replay) and replay.parked


def broken(ctx: ActivityContext) -> str | None:
    """The replay-contract error of this attempt, if the handler broke it (even if it
    caught the error)."""
    replay = getattr(ctx, "_replay", None)
    if isinstance(replay, Replay) and replay.broken is not None:
        return str(replay.broken)
    return None


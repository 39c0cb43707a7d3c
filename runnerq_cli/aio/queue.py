"""`AsyncRunnerQ`: the sync API (backend/api.py) awaited, its calls on a bounded thread pool.

Why a thread pool and not pymongo's `AsyncMongoClient`: the rules of the queue (an
enqueue's idempotency decisions, the claim's and the acknowledgement's fenced updates,
the group commit, the reads that skip malformed documents, the error translation at
the driver boundary) are written once, as sync code over pymongo's sync collections
(backend/store/driver.py, statements.py, queue/, views/). Under `AsyncMongoClient`
every one of those functions would need an `async` twin that awaits each command: a
second copy of the rules, to keep equal by hand. Here each awaited method calls the
sync method itself, so the results, the errors (our `RunnerQError` kinds, never a
pymongo one) and the types are the sync API's by construction (tests/test_aio.py
checks them side by side). The cost, measured (benchmarks/README.md, "asyncio API"):
one hop to a pool thread and back per call, small beside the round trip to the server.

The pool: `max_threads` threads (DEFAULT_MAX_THREADS unless given), made on first use
and named `runnerq-aio-N`; it bounds how many of this queue's calls are in flight at
once, the rest wait their turn in order (pymongo's connection pool, shared by the
process, bounds the connections beneath). `wait` holds a thread only for its reads,
never while it sleeps between them. Each call runs in a copy of the caller's
`contextvars` context, so what the caller's task carries (a trace context, say)
reaches the sync code.

Cancellation: a call cancelled while it runs (a request's timeout) stops being
awaited, but the pool thread finishes the command it sent; the server may have
applied an enqueue the caller never saw answered, exactly as after a network error.
Idempotency keys make such an enqueue safe to repeat.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from datetime import datetime
    from types import TracebackType

    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.documents import Activity, DeadLetterRecord, Event, Result
    from runnerq_cli.backend.domain.models import EnqueueResult
    from runnerq_cli.backend.domain.outage import OutageWatch
    from runnerq_cli.backend.domain.specs import ActivitySpec
    from runnerq_cli.backend.views.result_wait import WaitOutcome
    from runnerq_cli.config import Settings

__all__ = ["DEFAULT_MAX_THREADS", "AsyncRunnerQ", "connect_async"]

P = ParamSpec("P")
T = TypeVar("T")
# Calls of one AsyncRunnerQ in flight at once. Each is a round trip of a few
# milliseconds: eight keep a server busy for a web app's requests, well under
# pymongo's default pool of 100 connections.
DEFAULT_MAX_THREADS = 8


class AsyncRunnerQ:
    """The sync `RunnerQ` (`.sync`), awaited: the same methods, arguments, results and
    errors, each run on this queue's thread pool.

    Make it anywhere (no I/O until the first call); share one per queue in an
    application, and `await close()` it at the end (or `async with`).
    """

    def __init__(self, sync: RunnerQ, *, max_threads: int = DEFAULT_MAX_THREADS) -> None:
        from runnerq_cli.errors import InvalidArgument

        if not isinstance(max_threads, int) or max_threads < 1:
            raise InvalidArgument("max_threads must be at least 1", "max_threads")
        self.sync = sync
        self.max_threads = max_threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ the pool

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_threads,
                                                thread_name_prefix="runnerq-aio")
            return self._pool

    async def _call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on the pool, in a copy of the caller's context."""
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor(), call)

    async def close(self) -> None:
        """Let the calls in flight end, then stop the pool's threads (the process's
        shared MongoClient stays open for the rest of it). Calls after it start a new
        pool."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(pool.shutdown, wait=True))

    async def __aenter__(self) -> AsyncRunnerQ:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    # ------------------------------------------------------ what it is

    @property
    def settings(self) -> Settings:
        return self.sync.settings

    @property
    def queue(self) -> str:
        return self.sync.queue

    def for_queue(self, queue: str) -> AsyncRunnerQ:
        """An AsyncRunnerQ on another queue of the same database (its own pool)."""
        return AsyncRunnerQ(self.sync.for_queue(queue), max_threads=self.max_threads)

    # ------------------------------------------------ the queue's methods
    # Each is the sync method of the same name (RunnerQ's traits, backend/traits.py):
    # its docstring there says what it does; tests/test_aio.py checks the signatures match.

    async def enqueue(self, activity_type: str | ActivitySpec,
                      payload: Mapping[str, Any] | None = None,
                      **options: Any) -> EnqueueResult:
        """`RunnerQ.enqueue`: put one activity on the queue (options as `ActivitySpec`)."""
        return await self._call(self.sync.enqueue, activity_type, payload, **options)

    async def enqueue_many(self, specs: Sequence[ActivitySpec],
                           ) -> list[EnqueueResult | Exception]:
        """`RunnerQ.enqueue_many`: one entry per spec, its result or its error."""
        return await self._call(self.sync.enqueue_many, specs)

    async def get_activity(self, activity_id: uuid.UUID | str) -> Activity:
        """`RunnerQ.get_activity`: the activity, or NotFound."""
        return await self._call(self.sync.get_activity, activity_id)

    async def get_result(self, activity_id: uuid.UUID | str) -> Result | None:
        """`RunnerQ.get_result`: the stored result, or None."""
        return await self._call(self.sync.get_result, activity_id)

    async def get_activity_events(self, activity_id: uuid.UUID | str,
                                  limit: int = 100) -> list[Event]:
        """`RunnerQ.get_activity_events`: the activity's events, newest first."""
        return await self._call(self.sync.get_activity_events, activity_id, limit)

    async def wait(self, activity_id: uuid.UUID | str, timeout: float | None = None, *,
                   poll: float = 0.25, max_poll: float = 2.0,
                   outage: OutageWatch | None = None) -> WaitOutcome:
        """`RunnerQ.wait`: until the activity is terminal or `timeout` seconds pass.

        The same rules (`RunnerQ.waiting`); its reads on the pool, its sleeps on the
        event loop, so a long wait holds no thread (while the server is away, with
        `outage`, a look holds its pool thread until the server is back or the timeout).
        """
        waiting = self.sync.waiting(activity_id, timeout, poll=poll, max_poll=max_poll,
                                    outage=outage)
        while True:
            step = await self._call(waiting.look)
            if not isinstance(step, float):
                return step
            await asyncio.sleep(step)

    async def stats(self) -> dict[str, Any]:
        """`RunnerQ.stats`: counts by status and priority."""
        return await self._call(self.sync.stats)

    async def list_pending(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return await self._call(self.sync.list_pending, offset, limit)

    async def list_processing(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return await self._call(self.sync.list_processing, offset, limit)

    async def list_scheduled(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return await self._call(self.sync.list_scheduled, offset, limit)

    async def list_completed(self, offset: int = 0, limit: int = 50) -> list[Activity]:
        return await self._call(self.sync.list_completed, offset, limit)

    async def list_dead_letter(self, offset: int = 0,
                               limit: int = 50) -> list[DeadLetterRecord]:
        return await self._call(self.sync.list_dead_letter, offset, limit)

    async def ping(self) -> None:
        """`RunnerQ.ping`: Unavailable unless the server answers."""
        await self._call(self.sync.ping)

    async def now(self) -> datetime:
        """`RunnerQ.now`: the backend's clock (the server's, as this process knows it)."""
        return await self._call(self.sync.now)


def connect_async(uri: str | None = None, *, database: str | None = None,
                  queue: str | None = None, settings: Settings | None = None,
                  config_path: str | None = None,
                  max_threads: int = DEFAULT_MAX_THREADS) -> AsyncRunnerQ:
    """An `AsyncRunnerQ`: settings as `connect()` (arguments, else the environment and
    config file), plus the size of its thread pool. Makes no call to the server.

    >>> queue = connect_async("mongodb://localhost:27017", queue="emails")
    >>> added = await queue.enqueue("send_email", {"to": "a@example.com"})
    """
    from runnerq_cli.backend.api import connect

    return AsyncRunnerQ(connect(uri, database=database, queue=queue, settings=settings,
                                config_path=config_path), max_threads=max_threads)

"""`AsyncWorker`: the worker engine inside an asyncio application, its `async def`
handlers on the application's event loop.

It is the sync engine (worker/engine.py), not a second one: the claim loop, the
slots, the lease keeper, the outcome writer, the chores and shutdown run as they do
in `runnerq-mongo worker`, in threads of their own, so no database call ever runs on
the event loop. What changes is where a handler runs:

- an `async def` handler runs on the loop that started the worker (the application's),
  as a task among its others; its slot thread only waits for it, so the attempt keeps
  its slot, its lease renewals, its timeout (the task is cancelled at
  `timeout_seconds`: a retryable failure, as in the sync worker) and its place in
  graceful shutdown;
- a plain `def` handler runs on its slot thread, as in the sync worker: a blocking
  call in it never blocks the loop.

`concurrency` bounds the attempts in flight as in the sync worker (one slot thread
each, waiting). A handler that calls the queue should await an `AsyncRunnerQ`
(`ctx.enqueue` is the sync call: it would block the loop for a round trip).

Stop it with `await stop()` (graceful: running handlers finish within the
shutdown timeout, then the rest is released and their tasks cancelled), or
`await stop(force=True)`; `async with AsyncWorker(...)` starts and stops it, as a
FastAPI lifespan does (examples/fastapi_app.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from typing import TYPE_CHECKING, Any

from runnerq_cli.aio.queue import AsyncRunnerQ
from runnerq_cli.worker.api import create_worker
from runnerq_cli.worker.engine import Worker, WorkerEnd

if TYPE_CHECKING:
    from types import TracebackType

    from runnerq_cli.backend.traits import WorkerBackend
    from runnerq_cli.worker.handlers import HandlerRegistry

__all__ = ["AsyncWorker"]

STARTED_CHECK = 0.01  # seconds between looks at whether the engine has registered


class AsyncWorker:
    """A `Worker` started from, and running its async handlers on, the running loop.

    Arguments as `create_worker`: a registry, then `backend` (an `AsyncRunnerQ`, whose
    sync queue it uses, or a sync `RunnerQ`) or uri/database/queue, and the
    `Worker` options (concurrency, lease, shutdown_timeout, burst, ...).
    """

    def __init__(self, registry: HandlerRegistry | None = None, *,
                 backend: AsyncRunnerQ | WorkerBackend | None = None, **options: Any) -> None:
        sync = backend.sync if isinstance(backend, AsyncRunnerQ) else backend
        self.worker: Worker = create_worker(registry, backend=sync, **options)
        self._thread: threading.Thread | None = None
        self._done: asyncio.Future[WorkerEnd] | None = None

    @property
    def worker_id(self) -> str:
        return self.worker.worker_id

    @property
    def counters(self) -> dict[str, int]:
        """The engine's counters (`Worker.counters`)."""
        return self.worker.counters

    @property
    def in_flight(self) -> int:
        return self.worker.in_flight

    async def start(self) -> None:
        """Start the engine in a thread, async handlers on this loop; return once it has
        registered (or raise what stopped it starting: `Unavailable`, ...)."""
        if self._done is not None:
            raise RuntimeError("this AsyncWorker was started already")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[WorkerEnd] = loop.create_future()
        self._done = done
        self.worker.run_async_handlers_on(loop)

        def settle(end: WorkerEnd | None, error: BaseException | None) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            elif end is not None:
                done.set_result(end)

        def run() -> None:
            end: WorkerEnd | None = None
            error: BaseException | None = None
            try:
                end = self.worker.run(install_signals=False)
            except BaseException as exc:  # handed to whoever awaits the end
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed first: nobody awaits
                loop.call_soon_threadsafe(settle, end, error)

        self._thread = threading.Thread(target=run, name="runnerq-aio-worker", daemon=True)
        self._thread.start()
        while not self.worker.running.is_set() and not done.done():
            await asyncio.sleep(STARTED_CHECK)
        if done.done() and done.exception() is not None:
            done.result()  # raises what stopped the start

    async def wait(self) -> WorkerEnd:
        """Until the engine's run ends (stopped, or a burst that ran out of work)."""
        if self._done is None:
            raise RuntimeError("this AsyncWorker was not started")
        return await asyncio.shield(self._done)

    async def stop(self, force: bool = False) -> WorkerEnd:
        """Stop claiming and drain (as `Worker.stop`), then await the end; a second call
        (or `force`) stops at once."""
        self.worker.stop(force)
        if self._done is None:  # never started: nothing runs
            return WorkerEnd.STOPPED
        return await self.wait()

    async def run(self) -> WorkerEnd:
        """Start, and run until stopped: SIGTERM and SIGINT stop it (a second one at once)
        when this loop may take signals (the main thread, not on Windows)."""
        await self.start()
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self.worker.stop)
                installed.append(signum)
        try:
            return await self.wait()
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)

    async def __aenter__(self) -> AsyncWorker:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

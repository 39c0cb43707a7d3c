"""The asyncio API: the same queue and worker, awaited (docs/asyncio.md).

    from runnerq_cli.aio import AsyncWorker, connect_async

    queue = connect_async("mongodb://localhost:27017", queue="emails")
    added = await queue.enqueue("send_email", {"to": "a@example.com"})
    outcome = await queue.wait(added.activity_id, timeout=30)

`AsyncRunnerQ` runs the sync API's own methods on a bounded thread pool of its own
(queue.py says why); `AsyncWorker` runs the sync worker engine with its `async def`
handlers on the application's event loop (worker.py).
"""

from __future__ import annotations

from runnerq_cli.aio.queue import DEFAULT_MAX_THREADS, AsyncRunnerQ, connect_async
from runnerq_cli.aio.worker import AsyncWorker

__all__ = ["DEFAULT_MAX_THREADS", "AsyncRunnerQ", "AsyncWorker", "connect_async"]

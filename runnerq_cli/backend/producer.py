"""`Producer`: one queue's enqueue operations alone, for a process that only enqueues.

`RunnerQ` (api.py) is a `Producer` and every other operation: building one loads
the worker's claim, acknowledgement and lease modules, the chores and the
inspection views, since its traits' methods are its own, inherited. A run of
`runnerq-mongo enqueue` (often once per item in a CI step) uses none of them, and
pays for each module it loads, the more so where byte-code is not cached
(benchmarks/bench_cli_startup.py). So the enqueue side is made here on its own:
`Enqueuer` (queue/enqueueing.py) over the queue's context, on the process's shared
client; `RunnerQ` inherits this construction.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from runnerq_cli.backend.queue.enqueueing import Enqueuer
from runnerq_cli.backend.store.connection import client_for
from runnerq_cli.backend.store.context import QueueContext, utc_now
from runnerq_cli.config import Settings


class Producer(Enqueuer):
    """Enqueue on one queue (`enqueue`, `enqueue_many`, `enqueue_batch`); thread-safe, on
    the process's one pooled MongoClient for these settings."""

    def __init__(self, settings: Settings, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.settings = settings
        client = client_for(settings)
        super().__init__(QueueContext.create(settings, client[settings.database], clock=clock))

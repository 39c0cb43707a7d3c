"""What enqueueing one spec did (or, in a dry run, would do): `Outcome`.

Every enqueue has one, keyed or not; the rules that decide a keyed one are keys.py's,
which an enqueue without a key need not load (benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from runnerq_cli.backend.domain.models import EnqueueResult, Status
from runnerq_cli.errors import RunnerQError


@dataclass(frozen=True)
class Outcome:
    """What enqueueing one spec did (or, in a dry run, would do).

    kind: enqueued (a new activity), existing (the key's holder returned),
    duplicate (no-reuse: the key is held), not_failed (allow-reuse-on-failure: the
    holder has not failed), refused (the server refused the document), would_enqueue
    (dry run). `activity_id` is the new activity or the key's holder (None: a dry
    run's earlier line would hold it).
    """

    kind: str
    activity_id: uuid.UUID | None = None
    status: str = Status.PENDING.value
    error: RunnerQError | None = None

    def result(self) -> EnqueueResult | RunnerQError:
        """The public answer of `enqueue_many`: an EnqueueResult, or the error."""
        if self.error is not None:
            return self.error
        assert self.activity_id is not None
        return EnqueueResult(self.activity_id, self.kind == "enqueued", self.status)

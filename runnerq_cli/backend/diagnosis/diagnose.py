"""Diagnosis for operators, as one part of the facade: `doctor`, `explain ID`, `queues`.

Everything here returns data (checks, explanations, summaries); the CLI prints
it. The work is in modules by topic, each given what it reads:

- server_checks.py: the server (version, topology, write concern, clock);
- queue_checks.py: one queue (indexes, TTL, plans, workers, leases, outboxes,
  pauses, backlog, dead letters, malformed documents);
- plans.py: query plans of the queries the code runs (queries.py);
- explain.py: why an activity is where it is;
- discovery.py: which queues a database holds (and the refusal of one that does not).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from runnerq_cli.backend.diagnosis.explain import Explainer, Explanation
from runnerq_cli.backend.diagnosis.queue_checks import QueueChecks
from runnerq_cli.backend.diagnosis.server_checks import server_checks
from runnerq_cli.backend.domain.checks import Check, CheckStatus, failed
from runnerq_cli.backend.domain.documents import Activity
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.backend.ops.schedule_views import ScheduleViews
from runnerq_cli.backend.queue.workers import WorkerRegistry
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.discovery import discover_queues, require_queues

__all__ = ["Check", "CheckStatus", "Diagnosis", "Explanation", "failed"]


class Diagnosis:
    """The doctor's checks, explanations and queue discovery of one queue.

    `other(queue)` is the Diagnosis of another queue of the same database
    (`explain` looks an id up in every queue).
    """

    def __init__(self, ctx: QueueContext, registry: WorkerRegistry,
                 get_activity: Callable[[uuid.UUID], Activity],
                 paused: Callable[[], PauseState],
                 other: Callable[[str], Diagnosis],
                 schedules: Callable[[], ScheduleViews] | None = None) -> None:
        self._ctx = ctx
        self._schedules = schedules
        self._registry = registry
        self._paused = paused
        self._checks = QueueChecks(ctx, registry, paused)
        self._explainer = Explainer(ctx, registry, get_activity, paused,
                                    lambda queue: other(queue)._explainer)

    def server_checks(self) -> list[Check]:
        """Checks of the server itself (once per run, whatever the queues)."""
        return server_checks(self._ctx.db, self._ctx.settings)

    def queue_checks(self) -> list[Check]:
        """Checks of this queue; each is a few bounded, indexed queries (the schedules'
        checks: schedule_checks.py, one read of the schedules)."""
        checks = self._checks.run()
        if self._schedules is not None:
            from runnerq_cli.backend.diagnosis.schedule_checks import schedule_checks

            workers = self._registry.list_workers(TIMING.worker_stale_after)
            checks += schedule_checks(self._ctx.settings.queue, self._schedules().infos(),
                                      workers, self._ctx.clock(), self._paused())
        return checks

    def doctor(self, *, server: bool = True) -> list[Check]:
        """The doctor's checks: of the server (when `server`), then of this queue."""
        return [*(self.server_checks() if server else []), *self.queue_checks()]

    def explain(self, activity_id: uuid.UUID | str, *, any_queue: bool = False) -> Explanation:
        """Why the activity is where it is; NotFound if absent (in any queue, `any_queue`)."""
        return self._explainer.explain(activity_id, any_queue=any_queue)

    def pause_of(self, activity_type: str | None = None) -> dict[str, Any] | None:
        """The pause that stops claims (of `activity_type`, when given), or None."""
        return self._explainer.pause_of(activity_type)

    def discover_queues(self) -> list[str]:
        """Every RunnerQ queue in this database (from its collection names)."""
        return discover_queues(self._ctx.db)

    def absent_queue(self) -> str | None:
        """A sentence when this queue does not exist (a typo of --queue?), else None."""
        from runnerq_cli.backend.store.discovery import absent_queue

        return absent_queue(self._ctx.db, self._ctx.settings.queue)

    def require_queues(self, wanted: list[str]) -> list[str]:
        """`wanted`, each checked to exist; NotFound names the queues that do."""
        return require_queues(self._ctx.db, wanted)

    def summary(self, stale_after: float = TIMING.worker_stale_after) -> dict[str, Any]:
        """One queue at a glance: counts by status, oldest pending, workers, paused."""
        from runnerq_cli.backend.views.metrics import counts, oldest_pending

        ctx = self._ctx
        now = ctx.clock()
        by_status, _, estimated = counts(ctx)
        workers = self._registry.list_workers(stale_after)
        live = [w for w in workers if not w.stale]
        oldest = oldest_pending(ctx, now)
        pause = self._paused()
        return {
            "queue": ctx.settings.queue,
            "total": sum(by_status.values()),
            "by_status": by_status,
            "estimated": estimated,  # completed and total past metrics.EXACT_COMPLETED_UP_TO
            "oldest_pending_age_seconds": oldest["age_seconds"] if oldest else None,
            "workers": {"live": len(live), "stale": len(workers) - len(live),
                        "in_flight": sum(w.in_flight for w in live)},
            # The whole queue; some of its types paused is not the queue paused.
            "paused": pause.all,
            "paused_types": [] if pause.all else list(pause.types),
        }

"""The chore scheduler: a worker's share of keeping the queue healthy.

One thread drains the outbox buffer, heartbeats the worker registry and runs
the scheduler, reaper, outbox repair and retention purge at jittered intervals
(every interval: backend/domain/timing.py). Every worker runs them: each is one
indexed, fenced operation that is cheap when nothing is due, so no leader is
needed and a dead worker stops nothing. The shared ones are spread over the
live fleet: with N live workers each runs them every N intervals.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.worker.logs import WORKER_LOGGER, details
from runnerq_cli.worker.outcomes import brief

if TYPE_CHECKING:
    from runnerq_cli.backend.traits import WorkerBackend
    from runnerq_cli.worker.flights import Flights

log = logging.getLogger(WORKER_LOGGER)
# Chores any one worker can do for all, spread over the live fleet (up to
# TIMING.max_fleet_share workers).
SHARED_CHORES = frozenset({"scheduler", "reaper", "repair", "purge", "schedules"})


class ChoreScheduler:
    """Runs the chores of one worker until stopped."""

    def __init__(self, backend: WorkerBackend, flights: Flights, worker_id: str, *,
                 poll_interval: float, lease: float) -> None:
        self._backend = backend
        self._flights = flights
        self._worker_id = worker_id
        self.fleet = 1  # live workers on this queue, refreshed with each heartbeat
        self._chores: list[tuple[str, float, Callable[[], None]]] = [
            ("outbox", TIMING.outbox_drain_every, self._drain_outbox),
            ("heartbeat", TIMING.heartbeat_every, self._heartbeat),
            ("scheduler", poll_interval, self._scheduler),
            ("reaper", TIMING.reaper_every(lease), self._reaper),
            ("repair", TIMING.repair_every, self._repair),
            ("purge", TIMING.purge_every, self._purge),
            ("schedules", poll_interval, self._schedules),
        ]

    def run(self, stop: threading.Event) -> None:
        now = time.monotonic()
        # First runs spread over one interval, so workers started together don't align.
        last = {name: now - (1.0 if name in ("scheduler", "reaper") else random.random()) * every
                for name, every, _ in self._chores}
        spacing = {name: every for name, every, _ in self._chores}

        def due(name: str) -> float:
            # Shared chores run fleet-wide about once per interval: with N live workers
            # each runs them every N intervals, so a large fleet does not multiply the
            # load on the server. Computed afresh each time: when workers die, the
            # survivors' chores come due sooner at once (a crashed worker's outboxes
            # are repaired within TIMING.repaired_within of its death).
            share = self.fleet if name in SHARED_CHORES else 1
            return last[name] + spacing[name] * share

        while not stop.is_set():
            for name, every, chore in self._chores:
                if time.monotonic() >= due(name):
                    try:
                        chore()
                    except Exception as exc:
                        log.warning(f"{name} failed; will retry",
                                    extra=details(error=brief(exc)))
                    last[name] = time.monotonic()
                    jitter = 0.0 if name == "outbox" else TIMING.chore_jitter
                    spacing[name] = every * random.uniform(1 - jitter, 1 + jitter)
            next_due = min(due(name) for name, _, _ in self._chores)
            stop.wait(max(0.01, min(next_due - time.monotonic(), 1.0)))

    def _drain_outbox(self) -> None:
        self._backend.flush_outbox()  # errors come as Unavailable, the URI redacted

    def _heartbeat(self) -> None:
        counters, running = self._flights.snapshot()
        self._backend.registry.heartbeat_worker(self._worker_id, in_flight=running,
                                                counters=counters)
        live = self._backend.registry.count_live_workers(TIMING.fleet_stale_after)
        self.fleet = max(1, min(live, TIMING.max_fleet_share))

    def _scheduler(self) -> None:
        if self._backend.process_scheduled():
            self._flights.wake.set()

    def _reaper(self) -> None:
        counts = self._backend.requeue_expired()  # the backend logs what it did
        if counts["requeued"] or counts["dead_lettered"]:
            self._flights.wake.set()

    def _repair(self) -> None:
        self._backend.maintenance.repair_outboxes(TIMING.repair_grace)
        self._backend.maintenance.repair_wakes()  # parks a crash left asleep (design.md)

    def _schedules(self) -> None:
        # Fire the due schedules (docs/design.md, "Schedules"); the backend logs fires.
        if self._backend.schedules.fire_due()["fired"]:
            self._flights.wake.set()

    def _purge(self) -> None:
        self._backend.maintenance.purge_expired()  # the backend logs what it did

"""The worker engine: claim, run under a lease, acknowledge, and keep the queue healthy.

`Worker` puts together parts that each keep their own state and share only the
attempts in flight (flights.py):
- the claim loop, in the caller's thread, and the handler slots that claim for
  themselves while the queue has work (claiming.py), running handlers (execute.py);
- the outcome writer: one writer at a time, successes in batches, retried through
  a server hiccup (outcomes.py);
- the lease keeper: renewals at a third of the lease, `timeout_seconds` (leases.py);
- the chore scheduler: outbox drain, heartbeat, scheduler, reaper, outbox repair
  and retention, shared across the live fleet (chores.py);
- shutdown, here: let running work finish, then release the rest.

Safety: every acknowledgement and lease extension is fenced on the claim's
lease id (backend). A `ClaimLost` means another worker owns the activity now:
this worker drops it and changes nothing. Exactly one of the handler slot,
the lease keeper (timeout, claim lost) and shutdown (release) settles an
attempt (`Flights.take`); the others see it settled and keep out.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runnerq_cli.config import (
    kill_grace_seconds,
    lease_seconds,
    poll_interval_seconds,
    progress_interval_seconds,
    shutdown_timeout_seconds,
)
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.worker import startup
from runnerq_cli.worker.chores import ChoreScheduler
from runnerq_cli.worker.claiming import Claimer
from runnerq_cli.worker.flights import Flight, Flights
from runnerq_cli.worker.handlers import CATCH_ALL, HandlerRegistry
from runnerq_cli.worker.leases import LeaseKeeper
from runnerq_cli.worker.logs import WORKER_LOGGER, details
from runnerq_cli.worker.metrics import WORKER_STARTED, WORKER_STOPPED
from runnerq_cli.worker.outcomes import OutcomeWriter, brief, log_attempt
from runnerq_cli.worker.telemetry import Telemetry

if TYPE_CHECKING:
    import asyncio

    from runnerq_cli.backend.traits import WorkerBackend
    from runnerq_cli.worker.metrics import MetricsSink

__all__ = ["Worker", "WorkerEnd", "claim_types"]

log = logging.getLogger(WORKER_LOGGER)


class WorkerEnd(StrEnum):
    """How a worker's run ended (the `worker` command's exit code: cli/exits.py)."""

    STOPPED = "stopped"  # stopped and drained, nothing to report
    ERRORS = "errors"  # fail_on_error, and some attempt failed
    RELEASED = "released"  # running work was released at shutdown (shutdown_timeout)
    INTERRUPTED = "interrupted"  # stopped at once (force, a second signal)


OUTBOX_BATCH = 256  # outbox snapshots buffered before a forced flush
FORCED_UNREGISTER_WAIT = 2.0  # seconds a forced stop waits to leave the worker registry


def claim_types(registry: HandlerRegistry, types: tuple[str, ...],
                all_types: bool) -> tuple[str, ...]:
    """The activity types a worker claims, () for all of them; InvalidArgument if the
    choice is incoherent.

    By default a worker claims only the types it has handlers for: on a shared queue,
    one started with a single handler must leave every other team's work alone.
    Claiming every type is an explicit choice (`all_types`) and needs the catch-all
    handler (`"*"`) to run the types without a handler of their own. `types` narrows
    the handled types; each must have a handler.
    """
    if not len(registry):
        raise InvalidArgument("no handler to run: give handlers, commands or app",
                              "handlers", "commands", "app")
    if all_types:
        if registry.catch_all is None:
            raise InvalidArgument(f"all_types needs a catch-all handler ('{CATCH_ALL}')",
                                  "all_types")
        if types:
            raise InvalidArgument("all_types claims every type: leave out types",
                                  "all_types", "types")
        return ()
    if registry.catch_all is not None:
        raise InvalidArgument(f"a catch-all handler ('{CATCH_ALL}') runs every type: "
                              "give all_types to claim every type", "all_types")
    missing = [t for t in types if t not in registry]
    if missing:
        # "types" once only: the CLI writes each standalone "types" as its flag
        # ("--types (worker.types) names --types (worker.types) without a handler" was shown)
        some = "one" if len(missing) == 1 else "some"
        raise InvalidArgument(f"types names {some} without a handler: {', '.join(missing)}",
                              "types")
    return types or tuple(registry.types)


class Worker:
    """Run handlers for one queue until stopped (or, in burst mode, until idle).

    >>> from runnerq_cli import connect, HandlerRegistry, Worker
    >>> registry = HandlerRegistry()
    >>> @registry.handler("send_email")
    ... def send_email(payload, ctx): return {"sent": payload["to"]}
    >>> Worker(connect(queue="emails"), registry, concurrency=8).run()

    It logs on the `runnerq.worker` logger (worker/logs.py).

    Thread-safe controls: `stop()` (graceful), `stop(force=True)`, `start()`
    to run in a background thread, `join()`.
    """

    def __init__(self, backend: WorkerBackend, registry: HandlerRegistry, *,
                 concurrency: int | None = None, types: list[str] | tuple[str, ...] | None = None,
                 lease: float | None = None, poll_interval: float | None = None,
                 shutdown_timeout: float | None = None, burst: bool = False,
                 fail_on_error: bool = False, max_activities: int | None = None,
                 worker_id: str | None = None,
                 outbox_batch: int = OUTBOX_BATCH, maintenance: bool = True,
                 all_types: bool = False, metrics: MetricsSink | None = None,
                 tracing: bool | None = None, tracer_provider: Any = None,
                 kill_grace: float | None = None,
                 progress_interval: float | None = None) -> None:
        from runnerq_cli.backend.domain.naming import default_worker_id

        ws = backend.settings.worker
        self.backend = backend
        self.registry = registry
        self.concurrency = concurrency or ws.concurrency
        self.all_types = all_types
        self.types = claim_types(registry, tuple(types if types is not None else ws.types),
                                 all_types)
        # The same bounds as the settings (finite, in range): an API caller gets them too.
        self.lease = lease_seconds(lease or backend.settings.lease, "lease")
        self.poll_interval = poll_interval_seconds(poll_interval or ws.poll_interval,
                                                   "poll_interval")
        self.shutdown_timeout = shutdown_timeout_seconds(
            ws.shutdown_timeout if shutdown_timeout is None else shutdown_timeout,
            "shutdown_timeout")
        self.burst = burst
        self.fail_on_error = fail_on_error
        self.max_activities = max_activities
        from runnerq_cli.texts import worker_id as checked_worker_id

        self.worker_id = checked_worker_id(worker_id or default_worker_id())
        self.outbox_batch = outbox_batch
        self.maintenance = maintenance
        if self.concurrency < 1:
            raise InvalidArgument("concurrency must be at least 1")
        if max_activities is not None and max_activities < 1:
            raise InvalidArgument("max_activities must be at least 1", "max_activities")
        self._stopping = threading.Event()
        self._force = threading.Event()
        self._background_stop = threading.Event()
        self._flights = Flights(self.concurrency, max_activities)
        # Metrics to `metrics` (worker/metrics.py), spans when tracing (None: when the
        # process uses OpenTelemetry); neither: no telemetry, nothing called.
        self.metrics = metrics
        self._telemetry = Telemetry.make(
            metrics, tracing, tracer_provider, queue=backend.queue,
            concurrency=self.concurrency, running=lambda: self._flights.running)
        if self._telemetry is not None:
            backend = self._telemetry.backend(backend)  # the parts' calls counted
        self._writer = OutcomeWriter(backend, self._flights, self._force)
        self._keeper = LeaseKeeper(
            backend, self._flights, self._writer, self.lease,
            abandoned=lambda: self._slots.busy - self.in_flight,
            kill_grace=kill_grace_seconds(
                ws.kill_grace if kill_grace is None else kill_grace, "kill_grace"),
            progress_interval=progress_interval_seconds(
                progress_interval or ws.progress_interval, "progress_interval"))
        self._claimer = Claimer(backend, registry, self._flights, self._writer, self._keeper,
                                worker_id=self.worker_id, types=self.types, lease=self.lease,
                                poll_interval=self.poll_interval, burst=burst,
                                stopping=self._stopping, telemetry=self._telemetry)
        self._slots = self._claimer.slots
        self._chores = ChoreScheduler(backend, self._flights, self.worker_id,
                                      poll_interval=self.poll_interval, lease=self.lease)
        self._thread: threading.Thread | None = None
        self.end: WorkerEnd | None = None  # how `run` ended, once it has
        self.running = threading.Event()

    # ----------------------------------------------------------- controls

    @property
    def counters(self) -> dict[str, int]:
        """claimed, succeeded, retried, failed, dead_lettered, claims_lost, released,
        unacknowledged (flights.COUNTERS)."""
        return self._flights.counters

    def stop(self, force: bool = False) -> None:
        """Stop claiming and drain (or, with force or a second call, stop at once)."""
        if force or self._stopping.is_set():
            self._force.set()
        self._stopping.set()
        self._flights.wake.set()

    def start(self) -> threading.Thread:
        """Run in a background thread (no signal handlers); `join()` for the exit code."""
        self._thread = threading.Thread(target=self.run, kwargs={"install_signals": False},
                                        name="runnerq-worker", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> WorkerEnd | None:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.end

    def run_async_handlers_on(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Run `async def` handlers on this event loop (the application's: the asyncio
        worker, runnerq_cli/aio/worker.py) instead of a loop of their own per attempt.
        Call it before `start()`."""
        self._claimer.handler_loop = loop

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    # ---------------------------------------------------------------- run

    def run(self, install_signals: bool = True) -> WorkerEnd:
        """Work until stopped; returns how the run ended."""
        previous = self._install_signals() if install_signals else {}
        helpers: list[threading.Thread] = []
        untrack = self._report_start()
        try:
            # Copies of failure-path outboxes are batched while the worker runs; at
            # the end they are flushed below, unless the worker was stopped at once.
            with self.backend.buffered_outbox(self.outbox_batch, drain=False):
                try:
                    end = self._work(helpers)
                finally:
                    self._background_stop.set()
                    for thread in helpers:
                        thread.join(timeout=0.5 if self._force.is_set() else 10)
        finally:
            if not self._force.is_set():
                self._quietly("flushing the outbox", self.backend.flush_outbox)
                self._quietly("unregistering", self.backend.registry.unregister_worker,
                              self.worker_id)
            else:
                self._unregister_at_once(helpers)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.running.clear()
            self._report_stop(untrack)
        self.end = end
        log.log(logging.INFO if end is WorkerEnd.STOPPED else logging.WARNING, "worker stopped",
                extra=details(worker=self.worker_id, end=end.value, **self.counters))
        return end

    def _report_start(self) -> Callable[[], None] | None:
        """worker_started, and the slot gauges of a sink that has them (`track`)."""
        if self._telemetry is None:
            return None
        self._telemetry.count(WORKER_STARTED, self._telemetry.queue_labels)
        track = getattr(self.metrics, "track", None)
        return track(self.backend.queue, lambda: self._flights.running,
                     self.concurrency) if callable(track) else None

    def _report_stop(self, untrack: Callable[[], None] | None) -> None:
        if self._telemetry is not None:
            self._telemetry.count(WORKER_STOPPED, self._telemetry.queue_labels)
        if untrack is not None:
            untrack()

    def _unregister_at_once(self, helpers: list[threading.Thread]) -> None:
        """Stopped at once (a second signal, force): still leave the registry, or the
        worker would show as live with its old in-flight count until it went stale
        (stats counting work nobody runs, `workers` a live worker that is gone). Bounded
        like the hand-back in `_drain`: a server that does not answer quickly does not
        hold the exit (the entry then goes stale, as a killed worker's does). A heartbeat
        still on its way (it upserts) is waited for first, so it cannot re-create the
        entry just deleted."""
        deadline = time.monotonic() + FORCED_UNREGISTER_WAIT
        for thread in helpers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        thread = self._spawn(lambda: self._quietly(
            "unregistering", self.backend.registry.unregister_worker, self.worker_id),
            "runnerq-unregister")
        thread.join(timeout=max(0.1, deadline - time.monotonic()))

    def _work(self, helpers: list[threading.Thread]) -> WorkerEnd:
        """Register, start the helper threads, claim until stopped, drain; how it ended."""
        if self._stopping.is_set():  # stopped during start-up: nothing to start or undo
            return self._end(0)
        self.backend.registry.register_worker(self.worker_id, types=list(self.types),
                                              concurrency=self.concurrency)
        self._quietly("looking at the queue's indexes", self._say_missing_indexes)
        helpers.append(self._spawn(lambda: self._keeper.run(self._background_stop),
                                   "runnerq-lease-keeper"))
        if self.maintenance:
            helpers.append(self._spawn(lambda: self._chores.run(self._background_stop),
                                       "runnerq-maintenance"))
        log.info("worker started", extra=details(
            worker=self.worker_id, queue=self.backend.queue, concurrency=self.concurrency,
            types=",".join(self.types) or "*", lease=f"{self.lease:g}s",
            handlers=",".join(self.registry.types + ([CATCH_ALL] if self.all_types else []))))
        self.running.set()
        self._claimer.loop()
        self._flights.close()  # a slot (or an abandoned handler's thread) claims no more
        return self._end(self._drain())

    def _say_missing_indexes(self) -> None:
        """One warning at start when the queue's claim indexes were never made (a queue
        without `init-indexes`): the worker runs, but each claim scans the collection."""
        missing = self.backend.maintenance.missing_activity_indexes()
        if missing:
            log.warning("the queue's activities lack their indexes: every claim scans the "
                        "collection", extra=details(
                            queue=self.backend.queue, missing=len(missing),
                            fix=f"runnerq-mongo --queue {self.backend.queue} init-indexes"))

    def _end(self, released: int) -> WorkerEnd:
        if self._force.is_set():
            return WorkerEnd.INTERRUPTED
        if released:
            return WorkerEnd.RELEASED
        failures = (self.counters["retried"] + self.counters["failed"]
                    + self.counters["dead_lettered"] + self.counters["unacknowledged"])
        if self.fail_on_error and failures:
            return WorkerEnd.ERRORS
        return WorkerEnd.STOPPED

    def _install_signals(self) -> dict[int, Any]:
        """SIGTERM/SIGINT stop the worker (SIGINT too when inherited ignored); the
        dispositions to put back at the end. Signals recorded during the process's
        start-up (worker/startup.py) are obeyed now."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        early = startup.take_over()
        if early:
            log.info("stop signal received during start-up: stopping",
                     extra=details(signals=len(early)))
        for _ in early:
            self.stop()
        return previous

    def _on_signal(self, signum: int, frame: Any) -> None:
        # No logging here: the interrupted thread may hold the log's lock.
        self.stop()

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    # ----------------------------------------------------------- shutdown

    def _drain(self) -> int:
        """After the claim loop: let running handlers finish (up to the shutdown timeout
        when stopping), then release what is left. Returns how many were released."""
        while self._flights.reserved:  # a slot's claim still on its way: it will be in flight
            time.sleep(0.01)
        if not self.in_flight:
            return 0
        stopping = self._stopping.is_set()
        if stopping:
            log.info("stopping: waiting for running activities", extra=details(
                running=self.in_flight, timeout=f"{self.shutdown_timeout:g}s",
                hint="signal again to stop at once"))
        deadline = time.monotonic() + self.shutdown_timeout
        while self.in_flight and not self._force.is_set():
            if self._stopping.is_set() and not stopping:  # a signal during a burst's drain
                stopping = True
                deadline = time.monotonic() + self.shutdown_timeout
            if stopping and time.monotonic() >= deadline:
                break
            self._flights.wake.clear()
            self._writer.write()
            if self.in_flight:
                self._claimer.sleep(0.1)
        if not self._force.is_set():
            self._writer.write_now()  # what finished last, even within a retry back-off
        if not self.in_flight:
            return 0
        left = self._flights.all()
        if self._force.is_set():
            # Stop at once, but hand the work back if the server answers quickly.
            def hand_back() -> None:
                self._writer.write_now()
                self._release_all(left)

            thread = self._spawn(hand_back, "runnerq-release")
            thread.join(timeout=3.0)
            return len(left)
        released = self._release_all(left)
        return released or len(left)

    def _release_all(self, flights: list[Flight]) -> int:
        released = 0
        for flight in flights:
            if not self._flights.take(flight):
                continue
            flight.ctx.stopping.set()
            try:
                if self.backend.release(flight.claim, reason="worker shutdown"):
                    released += 1
                    self._flights.count("released")
                    log_attempt(flight, "released", "released at shutdown")
            except Exception as exc:
                log.warning("could not release; the reaper will requeue it", extra=details(
                    activity_id=str(flight.claim.activity_id), error=brief(exc)))
            finally:
                self._flights.forget(flight)
        return released

    def _quietly(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            log.warning(f"{what} failed", extra=details(error=brief(exc)))

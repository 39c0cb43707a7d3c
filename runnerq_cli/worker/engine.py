"""The worker engine: claim, run under a lease, acknowledge, and keep the queue healthy.

Threads of one worker process:
- the caller's thread runs the claim loop: it claims for idle slots, backs
  off (doubling up to `poll_interval`) when the queue is idle, reads the
  pause state, retries acknowledgements the server did not take, and
  handles shutdown;
- `concurrency` handler slots (daemon threads) run handlers. A slot that
  finishes an attempt hands its outcome over, writes every outcome waiting
  if no other thread is writing (successes in one batch of two commands),
  and claims its next activity itself while the queue has work: no hand-off
  between threads per activity. An empty queue sends it back to idle, and
  the claim loop, one poller for the whole worker, takes over;
- the lease keeper renews each running claim at a third of the lease and
  enforces `timeout_seconds`;
- the maintenance thread drains the outbox buffer, heartbeats the worker
  registry and runs the scheduler, reaper, outbox repair and retention purge
  at jittered intervals. Every worker runs them: each is one indexed, fenced
  operation that is cheap when nothing is due, so no leader is needed and a
  dead worker stops nothing.

Safety: every acknowledgement and lease extension is fenced on the claim's
lease id (backend). A `ClaimLost` means another worker owns the activity now:
this worker drops it and changes nothing. Exactly one of the handler slot,
the lease keeper (timeout, claim lost) and shutdown (release) settles an
attempt; the others see `settled` and keep out.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import queue
import random
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runnerq_cli import values
from runnerq_cli.backend.models import AckOutcome
from runnerq_cli.backend.timing import TIMING
from runnerq_cli.config import lease_seconds, poll_interval_seconds, shutdown_timeout_seconds
from runnerq_cli.errors import ClaimLost, ExitCode, InvalidArgument
from runnerq_cli.worker import startup
from runnerq_cli.worker.handlers import (
    CATCH_ALL,
    ActivityContext,
    Handler,
    HandlerRegistry,
    HandlerTimeout,
    NonRetryableError,
    RetryableError,
)
from runnerq_cli.worker.logs import (
    LEVELS,
    OUTCOME_LEVEL,
    WORKER_LOGGER,
    attempt_details,
    attempt_message,
    details,
)

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.models import Claim

log = logging.getLogger(WORKER_LOGGER)
MIN_IDLE = 0.05  # first idle wait; doubles up to poll_interval
OUTBOX_BATCH = 256  # outbox snapshots buffered before a forced flush
# Chores any one worker can do for all (see _maintenance_loop), spread over the live
# fleet (up to TIMING.max_fleet_share workers). Every interval: backend/timing.py.
SHARED_CHORES = frozenset({"scheduler", "reaper", "repair", "purge"})
# A worker silent this long no longer counts in the fleet that shares the chores.
FLEET_STALE_AFTER = TIMING.fleet_stale_after
ACK_BACKOFF_FIRST, ACK_BACKOFF_MAX = 0.2, 5.0
OUTCOME_BACKLOG = 2  # outcomes waiting to be written, per slot, before claims wait for them
RESULT_MAX_BYTES = 8 * 1024 * 1024  # the activity document (16 MiB max) carries it, payload too
# The worker counter each acknowledged outcome adds to.
OUTCOME_COUNTERS = {AckOutcome.COMPLETED: "succeeded", AckOutcome.RETRYING: "retried",
                    AckOutcome.FAILED: "failed", AckOutcome.DEAD_LETTERED: "dead_lettered"}
SELF_TIMED_GRACE = {"python": 0.0, "async": 2.0, "shell": 7.0}


class _Abandoned(Exception):
    """The attempt was settled elsewhere (timeout, claim lost, released)."""


@dataclass
class _InFlight:
    claim: Claim
    handler: Handler | None
    ctx: ActivityContext
    started: float
    timeout_at: float
    next_renew: float
    lease_ends: float  # monotonic time the last lease we know of runs out
    lock: threading.Lock = field(default_factory=threading.Lock)
    settled: bool = False
    presumed_lost: bool = False
    finished: float = 0.0  # monotonic time the attempt was settled (its outcome known)
    ack_give_up: float = 0.0  # set when a write of the outcome first fails

    @property
    def kind(self) -> str:
        if self.handler is None:
            return "python"
        if self.handler.kind == "shell":
            return "shell"
        return "async" if self.handler.is_async else "python"


class _Slots:
    """A small daemon-thread pool: daemon so an abandoned (timed-out) handler
    never keeps the process alive, sized so abandoned threads cannot starve it."""

    def __init__(self, max_threads: int, name: str,
                 on_free: Callable[[], None] = lambda: None) -> None:
        self.max_threads = max_threads
        self._name = name
        self._on_free = on_free
        self._tasks: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = (
            queue.SimpleQueue())
        self._lock = threading.Lock()
        self._threads = 0
        self.busy = 0

    def available(self) -> int:
        with self._lock:
            return self.max_threads - self.busy

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self.busy += 1
            if self._threads < self.busy:
                self._threads += 1
                threading.Thread(target=self._loop, name=f"{self._name}-{self._threads}",
                                 daemon=True).start()
        self._tasks.put((fn, args))

    def _loop(self) -> None:
        while True:
            fn, args = self._tasks.get()
            try:
                fn(*args)
            finally:
                with self._lock:
                    self.busy -= 1
                # Wake the claim loop only now: woken earlier, it would still see
                # this slot busy and sleep a whole poll interval.
                self._on_free()


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
        raise InvalidArgument("no handlers: give --handler, --exec or --app "
                              "(or worker.handlers / worker.exec / worker.app in the config)")
    if all_types:
        if registry.catch_all is None:
            raise InvalidArgument(f"--all-types needs a catch-all handler: --handler "
                                  f"'{CATCH_ALL}=MOD:FUNC' or --exec '{CATCH_ALL}=COMMAND'")
        if types:
            raise InvalidArgument("--all-types claims every type: leave out --types "
                                  "(worker.types)")
        return ()
    if registry.catch_all is not None:
        raise InvalidArgument(f"a catch-all handler ('{CATCH_ALL}') runs every type: "
                              "give --all-types to claim every type")
    missing = [t for t in types if t not in registry]
    if missing:
        raise InvalidArgument(f"--types names types without a handler: {', '.join(missing)}")
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

    def __init__(self, backend: RunnerQ, registry: HandlerRegistry, *,
                 concurrency: int | None = None, types: list[str] | tuple[str, ...] | None = None,
                 lease: float | None = None, poll_interval: float | None = None,
                 shutdown_timeout: float | None = None, burst: bool = False,
                 fail_on_error: bool = False, max_activities: int | None = None,
                 worker_id: str | None = None,
                 outbox_batch: int = OUTBOX_BATCH, maintenance: bool = True,
                 all_types: bool = False) -> None:
        from runnerq_cli.backend.control import PauseWatch
        from runnerq_cli.backend.queue import default_worker_id

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
        self.worker_id = worker_id or default_worker_id()
        self.outbox_batch = outbox_batch
        self.maintenance = maintenance
        if self.concurrency < 1:
            raise InvalidArgument("concurrency must be at least 1")
        if max_activities is not None and max_activities < 1:
            raise InvalidArgument("--max-activities must be at least 1")
        self.counters = {"claimed": 0, "succeeded": 0, "retried": 0, "failed": 0,
                         "dead_lettered": 0, "claims_lost": 0, "released": 0}
        self._inflight: dict[str, _InFlight] = {}
        # Outcomes waiting to be written, handed over by the slots and the lease keeper
        # (see _write_outcomes); after a failed write, retried from _retry_writes_at.
        self._finished: collections.deque[tuple[_InFlight, tuple[str, Any]]] = (
            collections.deque())
        self._write_lock = threading.Lock()  # one writer of outcomes at a time
        self._retry_writes_at = 0.0
        self._write_backoff = ACK_BACKOFF_FIRST
        self._backlogged = False  # claims held back for outcomes to be written
        self._running = 0  # attempts claimed and not yet settled
        self._reserved = 0  # claims being made (see _reserve)
        self._closed = False  # the claim loop has ended: no claim may start any more
        # What to claim, as (types, excluded types), or None when paused: the claim
        # loop's view, shared with the slots that claim their next activity themselves.
        self._scope: tuple[list[str] | None, list[str]] | None = None
        self._claim_types = list(self.types) or None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._fleet = 1  # live workers on this queue, refreshed with each heartbeat
        self._stopping = threading.Event()
        self._force = threading.Event()
        self._background_stop = threading.Event()
        self._slots = _Slots(self.concurrency * 2, "runnerq-slot", on_free=self._wake.set)
        self._thread: threading.Thread | None = None
        self._pause = PauseWatch(backend.paused, self.poll_interval)  # pause/resume
        self.exit_code: int | None = None
        self.running = threading.Event()

    # ----------------------------------------------------------- controls

    def stop(self, force: bool = False) -> None:
        """Stop claiming and drain (or, with force or a second call, stop at once)."""
        if force or self._stopping.is_set():
            self._force.set()
        self._stopping.set()
        self._wake.set()

    def start(self) -> threading.Thread:
        """Run in a background thread (no signal handlers); `join()` for the exit code."""
        self._thread = threading.Thread(target=self.run, kwargs={"install_signals": False},
                                        name="runnerq-worker", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> int | None:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.exit_code

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._inflight)

    # ---------------------------------------------------------------- run

    def run(self, install_signals: bool = True) -> int:
        """Work until stopped; returns the exit code (see errors.ExitCode)."""
        previous = self._install_signals() if install_signals else {}
        helpers: list[threading.Thread] = []
        try:
            # Copies of failure-path outboxes are batched while the worker runs; at
            # the end they are flushed below, unless the worker was stopped at once.
            with self.backend.buffered_outbox(self.outbox_batch, drain=False):
                try:
                    code = self._work(helpers)
                finally:
                    self._background_stop.set()
                    for thread in helpers:
                        thread.join(timeout=0.5 if self._force.is_set() else 10)
        finally:
            if not self._force.is_set():
                self._quietly("flushing the outbox", self.backend.flush_outbox)
                self._quietly("unregistering", self.backend.unregister_worker, self.worker_id)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.running.clear()
        self.exit_code = code
        log.log(logging.INFO if code == 0 else logging.WARNING, "worker stopped",
                extra=details(worker=self.worker_id, exit_code=code, **self.counters))
        return code

    def _work(self, helpers: list[threading.Thread]) -> int:
        """Register, start the helper threads, claim until stopped, drain; the exit code."""
        if self._stopping.is_set():  # stopped during start-up: nothing to start or undo
            return self._exit_code(0)
        self.backend.register_worker(self.worker_id, types=list(self.types),
                                     concurrency=self.concurrency)
        helpers.append(self._spawn(self._keeper_loop, "runnerq-lease-keeper"))
        if self.maintenance:
            helpers.append(self._spawn(self._maintenance_loop, "runnerq-maintenance"))
        log.info("worker started", extra=details(
            worker=self.worker_id, queue=self.backend.queue, concurrency=self.concurrency,
            types=",".join(self.types) or "*", lease=f"{self.lease:g}s",
            handlers=",".join(self.registry.types + ([CATCH_ALL] if self.all_types else []))))
        self.running.set()
        self._claim_loop()
        with self._lock:
            self._closed = True  # a slot (or an abandoned handler's thread) claims no more
        return self._exit_code(self._drain())

    def _exit_code(self, released: int) -> int:
        if self._force.is_set():
            return int(ExitCode.INTERRUPTED)
        if released:
            return int(ExitCode.WORKER_SHUTDOWN_TIMEOUT)
        failures = (self.counters["retried"] + self.counters["failed"]
                    + self.counters["dead_lettered"])
        if self.fail_on_error and failures:
            return int(ExitCode.WORKER_ERRORS)
        return int(ExitCode.OK)

    def _install_signals(self) -> dict[int, Any]:
        """SIGTERM/SIGINT stop the worker (SIGINT too when inherited ignored); the
        dispositions to put back at the end. Signals recorded during the process's
        start-up (worker/startup.py) are obeyed now."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        early, originals = startup.take_over()
        previous.update(originals)
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

    # -------------------------------------------------------------- claim

    def _reserve(self, most: int) -> int:
        """Reserve room for up to `most` claims about to be made; how many were reserved.

        Room is what `concurrency` leaves beside the handlers running and the
        claims being made (by the claim loop and by slots claiming their next
        activity themselves), within `max_activities`, and none while too many outcomes
        wait to be written. Give it back with `_unreserve`.
        """
        if len(self._finished) >= OUTCOME_BACKLOG * self.concurrency:
            # Outcomes are written more slowly than handlers finish: claim nothing
            # until they are (a claim's lease is not renewed once it has finished).
            self._backlogged = True
            return 0
        with self._lock:
            if self._closed or self._stopping.is_set():
                return 0
            free = self.concurrency - self._running - self._reserved
            if self.max_activities is not None:
                free = min(free, self.max_activities - self.counters["claimed"] - self._reserved)
            granted = max(0, min(free, most))
            self._reserved += granted
            return granted

    def _unreserve(self, count: int) -> None:
        with self._lock:
            self._reserved -= count

    def _claim_loop(self) -> None:
        idle = MIN_IDLE
        error_wait = MIN_IDLE
        swept = False
        while not self._stopping.is_set():
            if self.max_activities is not None and self.counters["claimed"] >= self.max_activities:
                return
            self._wake.clear()
            self._write_outcomes(for_at_most=self.poll_interval)
            # Refreshed every turn (the slots claim under it too): a pause takes effect
            # within a poll interval even while the slots keep themselves busy.
            scope = self._scope = self._claim_scope()
            if scope is None:  # everything this worker claims is paused
                if self.burst and not self.in_flight:
                    return
                self._sleep(self.poll_interval)
                continue
            capacity = self._reserve(self._slots.available())
            if capacity == 0:
                self._sleep(self.poll_interval)
                continue
            try:
                claims = self.backend.dequeue(self.worker_id, types=scope[0] or self._claim_types,
                                              limit=capacity, lease_seconds=self.lease,
                                              exclude_types=scope[1] or None,
                                              on_claim=self._start)
            except Exception as exc:  # server unavailable: back off, keep the process up
                log.warning("claim failed; retrying",
                            extra=details(error=_brief(exc), retry_in=f"{error_wait:.1f}s"))
                self._sleep(error_wait)
                error_wait = min(error_wait * 2 if error_wait >= 1 else 1.0, 30.0)
                continue
            finally:
                self._unreserve(capacity)
            error_wait = MIN_IDLE
            if claims:
                idle = MIN_IDLE
                swept = False
                continue
            if self.burst and not self.in_flight:
                # Done only after an empty claim that followed a maintenance pass (the
                # maintenance thread may have made work due in between).
                if swept:
                    return
                swept = self._sweep()
                continue
            swept = False
            self._sleep(idle)
            idle = min(idle * 2, self.poll_interval)

    def _sleep(self, seconds: float) -> None:
        """Wait until woken (a slot freed, work due, stop) or `seconds`, or until outcomes
        that could not be written are due for another try."""
        retry_in = self._retry_writes_at - time.monotonic()
        if self._finished and retry_in > 0:
            seconds = min(seconds, retry_in)
        elif self._finished and not self._write_lock.locked():
            return  # outcomes wait and nobody is writing them: no sleep
        self._wake.wait(seconds)

    def _claim_scope(self) -> tuple[list[str] | None, list[str]] | None:
        """(types, excluded types) to claim, or None when paused (read once per poll interval)."""
        state, changed = self._pause.current()
        if changed:
            if state.covers(self.types):
                log.info("queue paused: claiming nothing"
                         + (" (burst: exiting)" if self.burst else ""),
                         extra=details(paused=state.describe()))
            elif state.active:
                log.info("some types paused: not claiming them",
                         extra=details(paused=state.describe()))
            else:
                log.info("resumed: claiming again")
        return state.claim_scope(self.types)

    def _sweep(self) -> bool:
        """Burst mode: make due scheduled work and expired leases claimable; True once
        done (so the next empty claim means nothing is due)."""
        try:
            self.backend.process_scheduled()
            self.backend.requeue_expired()
        except Exception as exc:
            log.warning("maintenance failed", extra=details(error=_brief(exc)))
            self._wake.wait(self.poll_interval)
            return False
        return True

    def _claim_next(self) -> _InFlight | None:
        """A slot's next activity, claimed by the slot itself; None to go idle.

        While the queue has work, a slot that has finished an attempt claims its
        next one at once: no hand-off between threads per activity. It goes
        idle (and the claim loop, one poller for the whole worker, takes over)
        when the queue is empty, the worker is stopping or paused, outcomes
        cannot be written, or a claim fails.
        """
        scope = self._scope
        if (scope is None or self._stopping.is_set()
                or self._retry_writes_at > time.monotonic()):
            return None
        if not self._reserve(1):
            return None
        try:
            claims = self.backend.dequeue(self.worker_id, types=scope[0] or self._claim_types,
                                          limit=1, lease_seconds=self.lease,
                                          exclude_types=scope[1] or None)
            # Counted as running before the reservation is given back: in between, the
            # room would be counted nowhere and another claimer could take it.
            return self._begin(claims[0]) if claims else None
        except Exception:  # the claim loop tries again, backs off and says why
            return None
        finally:
            self._unreserve(1)

    def _begin(self, claim: Claim) -> _InFlight:
        act = claim.activity
        handler = self.registry.get(act.activity_type)
        now = time.monotonic()
        ctx = ActivityContext(
            activity_id=act.id, activity_type=act.activity_type, attempt=act.retry_count + 1,
            metadata=dict(act.metadata), worker_id=self.worker_id,
            timeout_seconds=float(act.timeout_seconds),
            _enqueue=self.backend.enqueue)
        flight = _InFlight(claim, handler, ctx, started=now,
                           timeout_at=now + act.timeout_seconds, next_renew=now + self.lease / 3,
                           lease_ends=now + self.lease)
        ctx._extend = lambda seconds, f=flight: self._extend(f, seconds)
        with self._lock:
            self._inflight[claim.lease_id] = flight
            self.counters["claimed"] += 1
            self._running += 1
        return flight

    def _start(self, claim: Claim) -> None:
        self._slots.submit(self._execute, self._begin(claim))

    # ------------------------------------------------------------ execute

    def _execute(self, flight: _InFlight) -> None:
        """Run attempts on this slot until there is nothing to claim (see _claim_next)."""
        current: _InFlight | None = flight
        while current is not None:
            try:
                outcome = self._call(current)
            except _Abandoned:
                return
            self._settle(current, outcome)
            self._write_outcomes()
            current = self._claim_next()

    def _call(self, flight: _InFlight) -> tuple[str, Any]:
        """Run the handler: ("ok", result) | ("fatal", error) | ("retry", error)."""
        handler = flight.handler
        act = flight.claim.activity
        if handler is None:
            return "fatal", f"no handler for {act.activity_type}"
        try:
            args = (act.payload, flight.ctx) if handler.takes_context else (act.payload,)
            if handler.is_async:
                result = asyncio.run(self._run_async(flight, handler.func(*args)))
            else:
                result = handler.func(*args)
        except _Abandoned:
            raise
        except NonRetryableError as exc:
            return "fatal", str(exc) or type(exc).__name__
        except RetryableError as exc:  # HandlerTimeout, shell failures, or the user's
            return "retry", str(exc) or type(exc).__name__
        except BaseException as exc:  # SystemExit, CancelledError too: else the slot
            # thread dies and the claim is held, unsettled, until its timeout.
            log.debug("handler raised", extra=details(
                activity_id=str(act.id),
                traceback="".join(traceback.format_exception(exc))[-4000:]))
            return "retry", _brief(exc)
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            return "fatal", f"result is not JSON-serialisable: {exc}"
        return _storable(result)

    async def _run_async(self, flight: _InFlight, coro: Any) -> Any:
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
                    raise _Abandoned()
                raise HandlerTimeout(f"timed out after {flight.ctx.timeout_seconds:g}s")

    def _take(self, flight: _InFlight) -> bool:
        """Become the one that settles this attempt; False if another already did."""
        with flight.lock:
            if flight.settled:
                return False
            flight.settled = True
        with self._lock:
            self._running -= 1
        return True

    def _settle(self, flight: _InFlight, outcome: tuple[str, Any]) -> bool:
        """Hand the outcome over to be written (_write_outcomes), unless the attempt was
        settled elsewhere; True if it was handed over."""
        if not self._take(flight):
            return False
        flight.finished = time.monotonic()
        self._finished.append((flight, outcome))
        return True

    def _forget(self, flight: _InFlight) -> None:
        """Drop an attempt that ended without its handler (claim lost, released)."""
        flight.ctx.cancelled.set()  # ctx.should_stop, for a handler still running
        self._drop(flight)
        self._wake.set()

    def _drop(self, flight: _InFlight) -> None:
        with self._lock:
            self._inflight.pop(flight.claim.lease_id, None)

    def _write_outcomes(self, for_at_most: float | None = None) -> None:
        """Write the outcomes handed over, unless another thread is writing them.

        Any thread may call it (a slot after its attempt, the claim loop): one
        writes at a time, everything waiting, and loops while more arrives, so
        nothing handed over is left behind and nobody waits. All successes go in
        one `ack_success_many` (two commands however many), failures one by
        one; batches grow with the load by themselves. An outcome the server
        does not take (it is away) is tried again after a back-off (the claim
        loop wakes for it), for up to TIMING.ack_retry_for; after that the lease runs
        out and the reaper hands the activity to another worker.
        """
        until = None if for_at_most is None else time.monotonic() + for_at_most
        while self._finished and time.monotonic() >= self._retry_writes_at:
            if until is not None and time.monotonic() >= until:
                return  # the claim loop has more to do (the pause); it comes back at once
            if not self._write_lock.acquire(blocking=False):
                return
            try:
                self._write_batch()
            finally:
                self._write_lock.release()
            if self._backlogged:
                self._backlogged = False
                self._wake.set()  # the claim loop may claim again

    def _write_now(self) -> None:
        """At shutdown: write what is waiting at once, back-off or not (after a slot's
        write in progress): an outcome not written now would run the activity again."""
        with self._write_lock:
            self._retry_writes_at = 0.0
        self._write_outcomes()

    def _write_batch(self) -> None:
        """Write what is waiting; on a server error, keep the rest for _retry_later."""
        batch = [self._finished.popleft() for _ in range(len(self._finished))]
        successes = [(flight, outcome) for flight, outcome in batch if outcome[0] == "ok"]
        failures = [(flight, outcome) for flight, outcome in batch if outcome[0] != "ok"]
        error: Exception | None = None
        unwritten: list[tuple[_InFlight, tuple[str, Any]]] = []
        if successes:
            try:
                answers: list[Any] = self.backend.ack_success_many(
                    [(flight.claim, outcome[1]) for flight, outcome in successes])
            except Exception as exc:  # the server is away: try nothing more now
                error, answers = exc, [exc] * len(successes)
            for (flight, outcome), answer in zip(successes, answers, strict=True):
                if isinstance(answer, InvalidArgument):  # the server refused the result
                    failures.append((flight, ("fatal", str(answer))))
                elif isinstance(answer, Exception) and not isinstance(answer, ClaimLost):
                    error = error or answer
                    unwritten.append((flight, outcome))
                else:
                    self._written(flight, outcome, answer)
        for flight, outcome in failures:
            if error is not None:
                unwritten.append((flight, outcome))
                continue
            try:
                answer = self.backend.ack_failure(flight.claim, outcome[1],
                                                  retryable=outcome[0] != "fatal")
            except ClaimLost as exc:
                answer = exc
            except Exception as exc:
                error = exc
                unwritten.append((flight, outcome))
                continue
            self._written(flight, outcome, answer)
        if error is not None:
            self._retry_later(unwritten, error)
        else:
            self._write_backoff = ACK_BACKOFF_FIRST

    def _written(self, flight: _InFlight, outcome: tuple[str, Any],
                 answer: AckOutcome | ClaimLost) -> None:
        """Count and log an outcome the server took (or refused as a lost claim)."""
        self._drop(flight)
        if isinstance(answer, ClaimLost):
            self._count("claims_lost")
            self._log_outcome(flight, "claim_lost",
                              "claim lost: the activity was reclaimed; outcome dropped")
            return
        self._count(OUTCOME_COUNTERS[answer])
        self._log_outcome(flight, answer.value, None if outcome[0] == "ok" else outcome[1])

    def _retry_later(self, unwritten: list[tuple[_InFlight, tuple[str, Any]]],
                     error: BaseException) -> None:
        now = time.monotonic()
        keep = []
        for flight, outcome in unwritten:
            flight.ack_give_up = flight.ack_give_up or now + TIMING.ack_retry_for
            if now >= flight.ack_give_up or self._force.is_set():
                self._drop(flight)
                log.error("could not acknowledge; the reaper will requeue it when its "
                          "lease expires", extra=details(
                              activity_id=str(flight.claim.activity_id), error=_brief(error)))
            else:
                keep.append((flight, outcome))
        self._finished.extendleft(reversed(keep))
        self._retry_writes_at = now + self._write_backoff
        self._write_backoff = min(self._write_backoff * 2, ACK_BACKOFF_MAX)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def _log_outcome(self, flight: _InFlight, outcome: str, error: str | None) -> None:
        act = flight.claim.activity
        ended = flight.finished or time.monotonic()
        level = LEVELS[OUTCOME_LEVEL.get(outcome, "info")]
        if not log.isEnabledFor(level):  # one record per attempt: build nobody's text
            return
        args = (outcome, act.activity_type, act.id, act.retry_count + 1,
                ended - flight.started, error)
        log.log(level, attempt_message(*args), extra=attempt_details(*args))

    # ------------------------------------------------------------- leases

    def _extend(self, flight: _InFlight, seconds: float | None) -> bool:
        if flight.settled:
            return False
        try:
            ok = self.backend.extend_lease(flight.claim, seconds or self.lease)
        except ClaimLost:
            self._lost(flight)
            return False
        if ok:
            now = time.monotonic()
            flight.next_renew = now + (seconds or self.lease) / 3
            flight.lease_ends = now + (seconds or self.lease)
        return ok

    def _lost(self, flight: _InFlight) -> None:
        if not self._take(flight):
            return
        self._count("claims_lost")
        self._log_outcome(flight, "claim_lost", "claim lost while running: another worker "
                          "holds the activity; this attempt's outcome will be dropped")
        self._forget(flight)

    def _keeper_loop(self) -> None:
        tick = max(0.05, min(0.5, self.lease / 10))
        while not self._background_stop.wait(tick):
            now = time.monotonic()
            with self._lock:
                flights = list(self._inflight.values())
            for flight in flights:
                if flight.settled:
                    continue
                if now >= flight.timeout_at + SELF_TIMED_GRACE[flight.kind]:
                    # A thread cannot be killed: settle the attempt as timed out and
                    # abandon the thread (its result will be dropped).
                    if self._settle(flight, ("retry", "timed out after "
                                             f"{flight.ctx.timeout_seconds:g}s")):
                        flight.ctx.cancelled.set()
                        self._wake.set()
                    if flight.kind == "python":
                        log.warning("abandoned a timed-out handler thread", extra=details(
                            activity_id=str(flight.claim.activity_id),
                            abandoned=self._slots.busy - self.in_flight))
                    continue
                if now >= flight.next_renew:
                    try:
                        self._extend(flight, self.lease)
                    except Exception as exc:  # server hiccup: try again soon
                        flight.next_renew = now + min(1.0, self.lease / 10)
                        log.warning("lease renewal failed; retrying", extra=details(
                            activity_id=str(flight.claim.activity_id), error=_brief(exc)))
                if now >= flight.lease_ends and not flight.presumed_lost:
                    # Renewals failed until the lease ran out: another worker may
                    # take the activity once the server is back. Tell the handler
                    # (ctx.should_stop); its acknowledgement will be fenced anyway.
                    flight.presumed_lost = True
                    flight.ctx.cancelled.set()
                    log.warning("lease ran out while the server was unreachable; claim "
                                "presumed lost",
                                extra=details(activity_id=str(flight.claim.activity_id)))

    # ----------------------------------------------------------- shutdown

    def _drain(self) -> int:
        """After the claim loop: let running handlers finish (up to the shutdown timeout
        when stopping), then release what is left. Returns how many were released."""
        while self._reserved:  # a slot's claim still on its way: it will be in flight
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
            self._wake.clear()
            self._write_outcomes()
            if self.in_flight:
                self._sleep(0.1)
        if not self._force.is_set():
            self._write_now()  # what finished last, even within a retry back-off
        if not self.in_flight:
            return 0
        with self._lock:
            left = list(self._inflight.values())
        released = 0
        if self._force.is_set():
            # Stop at once, but hand the work back if the server answers quickly.
            thread = self._spawn(lambda: (self._write_now(), self._release_all(left)),
                                 "runnerq-release")
            thread.join(timeout=3.0)
            return len(left)
        released = self._release_all(left)
        return released or len(left)

    def _release_all(self, flights: list[_InFlight]) -> int:
        released = 0
        for flight in flights:
            if not self._take(flight):
                continue
            flight.ctx.cancelled.set()
            try:
                if self.backend.release(flight.claim, reason="worker shutdown"):
                    released += 1
                    self._count("released")
                    self._log_outcome(flight, "released", "released at shutdown")
            except Exception as exc:
                log.warning("could not release; the reaper will requeue it", extra=details(
                    activity_id=str(flight.claim.activity_id), error=_brief(exc)))
            finally:
                self._forget(flight)
        return released

    # -------------------------------------------------------- maintenance

    def _maintenance_loop(self) -> None:
        tasks: list[tuple[str, float, Callable[[], None]]] = [
            ("outbox", TIMING.outbox_drain_every, self._drain_outbox),
            ("heartbeat", TIMING.heartbeat_every, self._heartbeat),
            ("scheduler", self.poll_interval, self._scheduler),
            ("reaper", TIMING.reaper_every(self.lease), self._reaper),
            ("repair", TIMING.repair_every, self._repair),
            ("purge", TIMING.purge_every, self._purge),
        ]
        now = time.monotonic()
        # First runs spread over one interval, so workers started together don't align.
        last = {name: now - (1.0 if name in ("scheduler", "reaper") else random.random()) * every
                for name, every, _ in tasks}
        spacing = {name: every for name, every, _ in tasks}

        def due(name: str) -> float:
            # Shared chores run fleet-wide about once per interval: with N live workers
            # each runs them every N intervals, so a large fleet does not multiply the
            # load on the server. Computed afresh each time: when workers die, the
            # survivors' chores come due sooner at once (a crashed worker's outboxes
            # are repaired within TIMING.repaired_within of its death).
            share = self._fleet if name in SHARED_CHORES else 1
            return last[name] + spacing[name] * share

        while not self._background_stop.is_set():
            for name, every, task in tasks:
                if time.monotonic() >= due(name):
                    try:
                        task()
                    except Exception as exc:
                        log.warning(f"{name} failed; will retry",
                                    extra=details(error=_brief(exc)))
                    last[name] = time.monotonic()
                    jitter = 0.0 if name == "outbox" else TIMING.chore_jitter
                    spacing[name] = every * random.uniform(1 - jitter, 1 + jitter)
            next_due = min(due(name) for name, _, _ in tasks)
            self._background_stop.wait(max(0.01, min(next_due - time.monotonic(), 1.0)))

    def _drain_outbox(self) -> None:
        self.backend.flush_outbox()  # errors come as Unavailable, the URI redacted

    def _heartbeat(self) -> None:
        with self._lock:
            counters = dict(self.counters)
            running = len(self._inflight)
        self.backend.heartbeat_worker(self.worker_id, in_flight=running, counters=counters)
        live = self.backend.count_live_workers(FLEET_STALE_AFTER)
        self._fleet = max(1, min(live, TIMING.max_fleet_share))

    def _scheduler(self) -> None:
        if self.backend.process_scheduled():
            self._wake.set()

    def _reaper(self) -> None:
        counts = self.backend.requeue_expired()  # the backend logs what it did
        if counts["requeued"] or counts["dead_lettered"]:
            self._wake.set()

    def _repair(self) -> None:
        self.backend.repair_outboxes(TIMING.repair_grace)

    def _purge(self) -> None:
        self.backend.purge_expired()  # the backend logs what it did

    def _quietly(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            log.warning(f"{what} failed", extra=details(error=_brief(exc)))


def _storable(result: Any) -> tuple[str, Any]:
    """("ok", result), or ("fatal", why) for a result MongoDB refuses (an int past 64 bits,
    too large, nested too deep): its acknowledgement could never succeed, and the reaper
    would rerun it."""
    import bson

    if values.nested_deeper_than({"data": result}):
        return "fatal", (f"result cannot be stored in MongoDB: nested deeper than "
                         f"{values.JSON_MAX_DEPTH} levels")
    try:
        size = len(bson.encode({"data": result}))
    except (bson.errors.InvalidDocument, OverflowError, TypeError, ValueError) as exc:
        return "fatal", f"result cannot be stored in MongoDB: {_brief(exc)}"
    if size > RESULT_MAX_BYTES:
        return "fatal", (f"result cannot be stored in MongoDB: {size} bytes, more than "
                         f"{RESULT_MAX_BYTES} (it travels in the activity document)")
    return "ok", result


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

"""Claiming: the claim loop (one poller per worker) and the slots that claim for themselves.

The caller's thread runs the claim loop: it claims for idle slots, backs off
(doubling up to `poll_interval`) when the queue is idle, reads the pause
state, and writes outcomes the server did not take when their retry is due.
`concurrency` handler slots (daemon threads) run handlers. A slot that
finishes an attempt hands its outcome over, writes every outcome waiting if no
other thread is writing, and claims its next activity itself while the queue
has work: no hand-off between threads per activity. An empty queue sends it
back to idle, and the claim loop takes over.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import TYPE_CHECKING

from runnerq_cli.worker.durable import Replay
from runnerq_cli.worker.durable_context import DurableContext
from runnerq_cli.worker.execute import Abandoned, call
from runnerq_cli.worker.flights import Flight, Flights, Slots
from runnerq_cli.worker.logs import WORKER_LOGGER, details
from runnerq_cli.worker.outcomes import brief

if TYPE_CHECKING:
    import asyncio

    from runnerq_cli.backend.domain.documents import Claim
    from runnerq_cli.backend.traits import WakeUp, WorkerBackend
    from runnerq_cli.worker.handlers import HandlerRegistry
    from runnerq_cli.worker.leases import LeaseKeeper
    from runnerq_cli.worker.outcomes import OutcomeWriter
    from runnerq_cli.worker.telemetry import Telemetry

log = logging.getLogger(WORKER_LOGGER)
MIN_IDLE = 0.05  # first idle wait; doubles up to poll_interval
# Idle on a change stream: wait this long for a wake-up before claiming anyway (a safety
# net: every write that makes work claimable wakes the worker before).
STREAM_IDLE_WAIT = 300.0
Scope = tuple[list[str] | None, list[str]]  # (types to claim or None for any, types excluded)


class Claimer:
    """Claims activities of `types` (() for every type) and runs them on the slots."""

    def __init__(self, backend: WorkerBackend, registry: HandlerRegistry, flights: Flights,
                 writer: OutcomeWriter, keeper: LeaseKeeper, *, worker_id: str,
                 types: tuple[str, ...], lease: float, poll_interval: float, burst: bool,
                 stopping: threading.Event, telemetry: Telemetry | None = None) -> None:
        from runnerq_cli.backend.domain.pause import PauseWatch

        self._backend = backend
        self._registry = registry
        self._flights = flights
        self._writer = writer
        self._keeper = keeper
        self._worker_id = worker_id
        self._types = types
        self._claim_types = list(types) or None
        self._lease = lease
        self._poll_interval = poll_interval
        self._burst = burst
        self._stopping = stopping
        self._telemetry = telemetry
        self.slots = Slots(flights.concurrency * 2, "runnerq-slot", on_free=flights.wake.set)
        self._pause = PauseWatch(backend.control.paused, poll_interval)  # pause/resume
        # What to claim, or None when paused: the claim loop's view, shared with the
        # slots that claim their next activity themselves.
        self._scope: Scope | None = None
        # The loop `async def` handlers run on (the asyncio worker); None: a loop of
        # their own per attempt (execute.py).
        self.handler_loop: asyncio.AbstractEventLoop | None = None
        self._pause_active = False
        # Idle waits end when the server reports work (backend/store/changes.py), where
        # it offers change streams; None in burst mode (it never idles). The second
        # stream reports pauses and resumes, which change no activity.
        self._changes: WakeUp | None = None
        self._pause_changes: WakeUp | None = None
        # The limit documents' changes (a slot freed anywhere, a limit changed): opened
        # once this process knows of a flow limit, so a queue without limits pays nothing.
        self._limit_changes: WakeUp | None = None

    def _reserve(self, most: int) -> int:
        """Room for up to `most` claims (flights.py), none while too many outcomes wait
        to be written; give it back with `flights.unreserve`."""
        if self._writer.backlogged():
            return 0
        return self._flights.reserve(most, self._stopping.is_set())

    def loop(self) -> None:
        """Claim until stopped (or, in burst mode, until nothing is due)."""
        if not self._burst:
            self._changes = self._backend.watch_claimable(self._types, self._flights.wake.set,
                                                          max_await=self._poll_interval)
            self._pause_changes = self._backend.watch_pauses(self._pause_changed,
                                                             max_await=self._poll_interval)
            self._changes.open()  # False (quietly) where there are none: polling
            self._pause_changes.open()
        try:
            self._loop()
        finally:
            for stream in (self._changes, self._pause_changes, self._limit_changes):
                if stream is not None:
                    stream.close()

    def _pause_changed(self) -> None:
        """The pause document changed (or its stream opened or broke): read it now."""
        self._pause.expire()
        self._flights.wake.set()

    def _loop(self) -> None:
        flights = self._flights
        idle = error_wait = MIN_IDLE
        swept = False
        while not self._stopping.is_set():
            if (flights.max_activities is not None
                    and flights.counters["claimed"] >= flights.max_activities):
                return
            flights.wake.clear()
            # A stream open before the claim reports every change after it: an empty
            # claim may then wait for a wake-up instead of polling.
            streaming = self._changes is not None and self._changes.ensure()
            # With the pause document's stream open, a pause or a resume wakes this loop
            # (_pause_changed): the state is read then, not every poll interval.
            told_of_pauses = self._pause_changes is not None and self._pause_changes.ensure()
            self._pause.every = STREAM_IDLE_WAIT if told_of_pauses else self._poll_interval
            self._writer.write(for_at_most=self._poll_interval)
            # Refreshed every turn (the slots claim under it too): a pause takes effect
            # within a poll interval even while the slots keep themselves busy.
            scope = self._scope = self._claim_scope()
            # A pause read that failed keeps the last state known: the change that asked
            # for it was told already, so poll until a read succeeds.
            told_of_pauses = told_of_pauses and self._pause.fresh
            if scope is None:  # everything this worker claims is paused
                if self._burst and not len(flights):
                    return
                self.sleep(STREAM_IDLE_WAIT if told_of_pauses else self._poll_interval)
                continue
            capacity = self._reserve(self.slots.available())
            if capacity == 0:
                self.sleep(self._poll_interval)
                continue
            try:
                claims = self._backend.dequeue(
                    self._worker_id, types=scope[0] or self._claim_types, limit=capacity,
                    lease_seconds=self._lease, exclude_types=scope[1] or None,
                    on_claim=self._start)
            except Exception as exc:  # server unavailable: back off, keep the process up
                log.warning("claim failed; retrying",
                            extra=details(error=brief(exc), retry_in=f"{error_wait:.1f}s"))
                self.sleep(error_wait)
                error_wait = min(error_wait * 2 if error_wait >= 1 else 1.0, 30.0)
                continue
            finally:
                flights.unreserve(capacity)
            error_wait = MIN_IDLE
            if claims:
                idle = MIN_IDLE
                swept = False
                continue
            if self._burst and not len(flights):
                # Done only after an empty claim that followed a maintenance pass (the
                # maintenance thread may have made work due in between).
                if swept:
                    return
                swept = self._sweep()
                continue
            swept = False
            if streaming and (told_of_pauses or not self._pause_active) \
                    and self._changes is not None and self._changes.live \
                    and self._told_of_limits():
                self.sleep(self._idle_wait())  # no claims while idle: the server tells
                continue
            self.sleep(idle)
            idle = min(idle * 2, self._poll_interval)

    def _told_of_limits(self) -> bool:
        """Whether a freed slot would wake this loop: no limit known to this process, or
        the limit documents' stream is live (opened on the first limit seen). Without it
        an idle loop polls, and full types are retried every `flow.FULL_BACKOFF`."""
        if not self._backend.flow_limited():
            return True
        if self._limit_changes is None:
            self._limit_changes = self._backend.watch_limits(self._flights.wake.set,
                                                             max_await=self._poll_interval)
            return self._limit_changes.open()
        return self._limit_changes.ensure()

    def _idle_wait(self) -> float:
        """An idle wait on streams: until told, or until a limited type may start by the
        clock (a rate's next start, a stale slot's repair: no write announces those)."""
        retry = self._backend.flow_retry_in()
        return STREAM_IDLE_WAIT if retry is None else min(STREAM_IDLE_WAIT, retry)

    def sleep(self, seconds: float) -> None:
        """Wait until woken (a slot freed, work due, stop) or `seconds`, or until outcomes
        that could not be written are due for another try."""
        bound = self._writer.sleep_bound(seconds)
        if bound is not None:  # None: outcomes wait and nobody is writing them
            self._flights.wake.wait(bound)

    def _claim_scope(self) -> Scope | None:
        """What to claim, or None when paused (read once per poll interval)."""
        state, changed = self._pause.current()
        # A resume changes no activity: without the pause document's stream, poll meanwhile
        self._pause_active = state.active
        if changed:
            if state.covers(self._types):
                log.info("queue paused: claiming nothing"
                         + (" (burst: exiting)" if self._burst else ""),
                         extra=details(paused=state.describe().removeprefix("paused: ")))
            elif state.active:
                log.info("some types paused: not claiming them",
                         extra=details(paused=state.describe().removeprefix("paused: ")))
            else:
                log.info("resumed: claiming again")
        return state.claim_scope(self._types)

    def _sweep(self) -> bool:
        """Burst mode: make due scheduled work and expired leases claimable; True once
        done (so the next empty claim means nothing is due)."""
        try:
            self._backend.process_scheduled()
            self._backend.requeue_expired()
        except Exception as exc:
            log.warning("maintenance failed", extra=details(error=brief(exc)))
            self._flights.wake.wait(self._poll_interval)
            return False
        return True

    def _claim_next(self) -> Flight | None:
        """A slot's next activity, claimed by the slot itself; None to go idle.

        While the queue has work, a slot that has finished an attempt claims its
        next one at once. It goes idle (and the claim loop takes over) when the
        queue is empty, the worker is stopping or paused, outcomes cannot be
        written, or a claim fails.
        """
        scope = self._scope
        if scope is None or self._stopping.is_set() or self._writer.retry_pending():
            return None
        if not self._reserve(1):
            return None
        try:
            claims = self._backend.dequeue(self._worker_id, types=scope[0] or self._claim_types,
                                           limit=1, lease_seconds=self._lease,
                                           exclude_types=scope[1] or None)
            # Counted as running before the reservation is given back: in between, the
            # room would be counted nowhere and another claimer could take it.
            return self._begin(claims[0]) if claims else None
        except Exception:  # the claim loop tries again, backs off and says why
            return None
        finally:
            self._flights.unreserve(1)

    def _begin(self, claim: Claim) -> Flight:
        act = claim.activity
        now = time.monotonic()
        ctx = DurableContext(
            activity_id=act.id, activity_type=act.activity_type, attempt=act.retry_count + 1,
            metadata=dict(act.metadata), worker_id=self._worker_id,
            timeout_seconds=float(act.timeout_seconds), _enqueue=self._backend.enqueue)
        flight = Flight(claim, self._registry.get(act.activity_type), ctx, started=now,
                        timeout_at=now + act.timeout_seconds,
                        next_renew=now + self._lease / 3, lease_ends=now + self._lease)
        ctx._extend = functools.partial(self._keeper.extend, flight)
        ctx._progress = functools.partial(self._keeper.progress, flight)
        ctx.kill_grace = self._keeper.kill_grace
        durable = getattr(self._backend, "durable", None)  # the replay's storage, if any
        if durable is not None:
            ctx._replay = Replay(durable, claim, flight.timeout_at, ctx.stopping)
        self._flights.add(flight)
        if self._telemetry is not None:
            flight.watch = self._telemetry.attempt(flight)
        return flight

    def _start(self, claim: Claim) -> None:
        self.slots.submit(self._execute, self._begin(claim))

    def _execute(self, flight: Flight) -> None:
        """Run attempts on this slot until there is nothing to claim (see _claim_next).

        Every attempt this slot starts is settled before it moves on, whatever goes
        wrong: `call` answers for the handler, and a failure of the worker's own
        around it fails the attempt too, rather than leave its claim held and renewed.
        """
        current: Flight | None = flight
        while current is not None:
            try:
                self._run(current)
            except Abandoned:
                return
            except BaseException as exc:
                failed = ("retry", f"the worker failed running the handler: {brief(exc)}")
                log.error("a handler slot failed", extra=details(
                    activity_id=str(current.claim.activity_id), error=brief(exc)))
                if self._writer.hand_over(current, failed):
                    self._writer.write()
            current = self._claim_next()

    def _run(self, flight: Flight) -> None:
        flight.thread = threading.current_thread()
        watch = flight.watch
        if watch is None:
            outcome = call(flight, self.handler_loop)
        else:  # the handler runs in its attempt's span (telemetry.py)
            token = watch.enter()
            try:
                outcome = call(flight, self.handler_loop)
            finally:
                watch.leave(token)
        if flight.progress_pending is not None:  # the last report, before the outcome
            self._keeper.write_progress(flight, time.monotonic(), final=True)
        self._writer.hand_over(flight, outcome)
        self._writer.write()

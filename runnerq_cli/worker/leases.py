"""The lease keeper: renew each running claim, enforce `timeout_seconds`, write progress.

One thread renews each attempt's lease at a third of the lease, settles an
attempt that ran past its timeout (a thread cannot be killed: its result will be
dropped), and tells a handler whose lease ran out while the server could not be
reached that its claim is presumed lost (`ctx.should_stop`). Every renewal is
fenced on the claim's lease id (backend): a `ClaimLost` means another worker
owns the activity now, an `ActivityCancelled` that an operator cancelled it
(`ctx.cancelled`; docs/design.md, "Cancelling a running activity"): either way the
handler is told to stop and its outcome is dropped.

The handler's progress reports (`ctx.progress`) are written here too, never in the
handler's own call: the latest one at most once per `progress_interval`, fenced on the
claim like a renewal, so a refused one is how a cancel may be noticed sooner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runnerq_cli.errors import ActivityCancelled, ClaimLost
from runnerq_cli.worker.logs import WORKER_LOGGER, details
from runnerq_cli.worker.outcomes import brief, log_attempt

if TYPE_CHECKING:
    from runnerq_cli.backend.traits import QueueBackend
    from runnerq_cli.worker.flights import Flight, Flights
    from runnerq_cli.worker.outcomes import OutcomeWriter

log = logging.getLogger(WORKER_LOGGER)
# How long past its timeout an attempt that times itself out (async: cancelled; shell:
# killed) may take to say so before the keeper settles it.
SELF_TIMED_GRACE = {"python": 0.0, "async": 2.0, "shell": 7.0}


class LeaseKeeper:
    """Renewals, timeouts and lost claims of the attempts in flight."""

    def __init__(self, backend: QueueBackend, flights: Flights, writer: OutcomeWriter,
                 lease: float, abandoned: Callable[[], int], *,
                 progress_interval: float = 5.0, kill_grace: float = 5.0) -> None:
        self._backend = backend
        self._flights = flights
        self._writer = writer
        self._lease = lease
        self._abandoned = abandoned  # handler threads left running past their timeout
        self.progress_interval = progress_interval
        self.kill_grace = kill_grace  # a shell handler's, between SIGTERM and SIGKILL

    def extend(self, flight: Flight, seconds: float | None) -> bool:
        """Push the attempt's lease to now + `seconds` (default: the worker's lease);
        False once it has ended or lost its claim (`ctx.extend_lease`)."""
        if flight.settled:
            return False
        try:
            ok = bool(self._backend.extend_lease(flight.claim, seconds or self._lease))
        except ClaimLost as exc:
            self._lost(flight, exc)
            return False
        if ok:
            now = time.monotonic()
            flight.next_renew = now + (seconds or self._lease) / 3
            flight.lease_ends = now + (seconds or self._lease)
        return ok

    def _lost(self, flight: Flight, exc: ClaimLost) -> None:
        cancelled = isinstance(exc, ActivityCancelled)
        if cancelled:  # before `forget` sets should_stop: a handler sees both at once
            flight.ctx.cancel_seen.set()
        if not self._flights.take(flight):
            return
        self._flights.count("claims_lost")
        log_attempt(flight, "claim_lost", "cancelled by an operator while running; the "
                    "handler is told to stop and its outcome will be dropped" if cancelled
                    else "claim lost while running: another worker holds the activity; "
                    "this attempt's outcome will be dropped")
        self._flights.forget(flight)

    # ------------------------------------------------------------ progress

    def progress(self, flight: Flight, report: dict[str, Any]) -> None:
        """`ctx.progress`: keep the latest report for the next write (no I/O here)."""
        with flight.progress_lock:
            flight.progress_pending = report

    def write_progress(self, flight: Flight, now: float, *, final: bool = False) -> None:
        """Write the waiting report if its interval has passed (`final`: at the attempt's
        end, whatever the interval). A refused write is a lost claim (or the cancel);
        a server hiccup keeps the report for the next tick (a newer one wins)."""
        with flight.progress_lock:
            report = flight.progress_pending
            if report is None or flight.settled or (now < flight.progress_next and not final):
                return
            flight.progress_pending = None
            try:
                self._backend.report_progress(flight.claim, report)
                flight.progress_next = now + self.progress_interval
            except ClaimLost as exc:
                if not final:  # at the end the acknowledgement answers for the claim
                    self._lost(flight, exc)
            except Exception as exc:
                flight.progress_pending = report
                flight.progress_next = now + min(1.0, self.progress_interval)
                log.warning("progress write failed; retrying", extra=details(
                    activity_id=str(flight.claim.activity_id), error=brief(exc)))

    def run(self, stop: threading.Event) -> None:
        """Look at every attempt a few times per lease until `stop`."""
        tick = max(0.05, min(0.5, self._lease / 10))
        while not stop.wait(tick):
            now = time.monotonic()
            for flight in self._flights.all():
                if not flight.settled:
                    self._look_at(flight, now)

    def _orphaned(self, flight: Flight, now: float) -> str | None:
        """Why no handler runs this unsettled attempt, or None while one does: a lease
        is renewed only while its handler really runs."""
        if flight.thread is None:  # a slot picks a claim up within milliseconds
            return ("the handler never started" if now - flight.started > self._lease
                    else None)
        if not flight.thread.is_alive():
            return "the handler's slot ended without an outcome"
        return None

    def _look_at(self, flight: Flight, now: float) -> None:
        orphaned = self._orphaned(flight, now)
        if orphaned:
            # Renewing would hold the activity for nobody, forever: fail the attempt.
            if self._writer.hand_over(flight, ("retry", orphaned)):
                self._flights.wake.set()
            return
        grace = SELF_TIMED_GRACE[flight.kind]
        if flight.kind == "shell":  # its SIGTERM, the grace, then SIGKILL, and 2 s to say so
            grace = max(grace, self.kill_grace + 2.0)
        if now >= flight.timeout_at + grace:
            # A thread cannot be killed: settle the attempt as timed out and
            # abandon the thread (its result will be dropped).
            flight.fault = flight.fault or "timeout"
            if self._writer.hand_over(flight, ("retry", "timed out after "
                                               f"{flight.ctx.timeout_seconds:g}s")):
                flight.ctx.stopping.set()
                self._flights.wake.set()
            if flight.kind == "python":
                log.warning("abandoned a timed-out handler thread", extra=details(
                    activity_id=str(flight.claim.activity_id), abandoned=self._abandoned()))
            return
        if now >= flight.next_renew:
            try:
                self.extend(flight, self._lease)
            except Exception as exc:  # server hiccup: try again soon
                flight.next_renew = now + min(1.0, self._lease / 10)
                log.warning("lease renewal failed; retrying", extra=details(
                    activity_id=str(flight.claim.activity_id), error=brief(exc)))
        if flight.progress_pending is not None:
            self.write_progress(flight, now)
        if now >= flight.lease_ends and not flight.presumed_lost:
            # Renewals failed until the lease ran out: another worker may take the
            # activity once the server is back. Tell the handler (ctx.should_stop);
            # its acknowledgement will be fenced anyway.
            flight.presumed_lost = True
            flight.ctx.stopping.set()
            log.warning("lease ran out while the server was unreachable; claim presumed lost",
                        extra=details(activity_id=str(flight.claim.activity_id)))

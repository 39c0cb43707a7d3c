"""The lease keeper: renew each running claim, enforce `timeout_seconds`.

One thread renews each attempt's lease at a third of the lease, settles an
attempt that ran past its timeout (a thread cannot be killed: its result will be
dropped), and tells a handler whose lease ran out while the server could not be
reached that its claim is presumed lost (`ctx.should_stop`). Every renewal is
fenced on the claim's lease id (backend): a `ClaimLost` means another worker
owns the activity now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from runnerq_cli.errors import ClaimLost
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
                 lease: float, abandoned: Callable[[], int]) -> None:
        self._backend = backend
        self._flights = flights
        self._writer = writer
        self._lease = lease
        self._abandoned = abandoned  # handler threads left running past their timeout

    def extend(self, flight: Flight, seconds: float | None) -> bool:
        """Push the attempt's lease to now + `seconds` (default: the worker's lease);
        False once it has ended or lost its claim (`ctx.extend_lease`)."""
        if flight.settled:
            return False
        try:
            ok = bool(self._backend.extend_lease(flight.claim, seconds or self._lease))
        except ClaimLost:
            self._lost(flight)
            return False
        if ok:
            now = time.monotonic()
            flight.next_renew = now + (seconds or self._lease) / 3
            flight.lease_ends = now + (seconds or self._lease)
        return ok

    def _lost(self, flight: Flight) -> None:
        if not self._flights.take(flight):
            return
        self._flights.count("claims_lost")
        log_attempt(flight, "claim_lost", "claim lost while running: another worker "
                    "holds the activity; this attempt's outcome will be dropped")
        self._flights.forget(flight)

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
        if now >= flight.timeout_at + SELF_TIMED_GRACE[flight.kind]:
            # A thread cannot be killed: settle the attempt as timed out and
            # abandon the thread (its result will be dropped).
            flight.fault = flight.fault or "timeout"
            if self._writer.hand_over(flight, ("retry", "timed out after "
                                               f"{flight.ctx.timeout_seconds:g}s")):
                flight.ctx.cancelled.set()
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
        if now >= flight.lease_ends and not flight.presumed_lost:
            # Renewals failed until the lease ran out: another worker may take the
            # activity once the server is back. Tell the handler (ctx.should_stop);
            # its acknowledgement will be fenced anyway.
            flight.presumed_lost = True
            flight.ctx.cancelled.set()
            log.warning("lease ran out while the server was unreachable; claim presumed lost",
                        extra=details(activity_id=str(flight.claim.activity_id)))

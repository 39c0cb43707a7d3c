"""What a worker's parts share: the attempts in flight, the room to claim, the counters.

The claim loop and the slots (claiming.py), the outcome writer (outcomes.py), the
lease keeper (leases.py), the chores (chores.py) and shutdown (engine.py) each
keep their own state; this is the only state they share, behind one lock. Exactly
one of the handler's slot, the lease keeper (timeout, claim lost) and shutdown
(release) settles an attempt (`take`): the others see it settled and keep out.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from runnerq_cli.backend.domain.error_text import describe
from runnerq_cli.backend.domain.naming import COUNTERS  # the registry's: the heartbeat stores each
from runnerq_cli.worker.logs import WORKER_LOGGER, details

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.documents import Claim
    from runnerq_cli.worker.handlers import ActivityContext, Handler

log = logging.getLogger(WORKER_LOGGER)


class Watch(Protocol):
    """What the parts call on an attempt's watch: its metrics and span (telemetry.py's
    `AttemptWatch` is the one). Named here, not imported from there: telemetry and
    tracing read a `Flight`, so the flights know no telemetry."""

    def enter(self) -> Any:
        """Make the attempt's span current in this thread; the token for `leave`."""

    def leave(self, token: Any) -> None:
        """Restore the span that was current before `enter`."""

    def ended(self, outcome: str) -> None:
        """The attempt's outcome is known (counted and the span ended, once)."""


@dataclass
class Flight:
    """One attempt: its claim, handler and context, and when things are due for it."""

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
    # The slot thread running the handler, once it has started: while the attempt is
    # unsettled its lease is renewed only as long as this thread lives (leases.py).
    thread: threading.Thread | None = None
    ack_give_up: float = 0.0  # set when a write of the outcome first fails
    # What went wrong, where the handler's run knows it: "timeout", "panic",
    # "handler_not_found" (execute.py, leases.py), for the metrics and the span.
    fault: str = ""
    watch: Watch | None = None  # its metrics and span (telemetry.py), when reported
    # The handler's latest progress report not yet written, and when the next write may
    # be made (monotonic); the lock makes a report's write one at a time (leases.py).
    progress_pending: dict[str, Any] | None = None
    progress_next: float = 0.0
    progress_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def kind(self) -> str:
        if self.handler is None:
            return "python"
        if self.handler.kind == "shell":
            return "shell"
        return "async" if self.handler.is_async else "python"


class Flights:
    """The attempts in flight (by lease id), the claims being made, the counters.

    Room to claim is what `concurrency` leaves beside the attempts running and the
    claims being made (by the claim loop and by slots claiming their next activity
    themselves), within `max_activities`; none once claiming has closed.
    """

    def __init__(self, concurrency: int, max_activities: int | None) -> None:
        self.concurrency = concurrency
        self.max_activities = max_activities
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.wake = threading.Event()  # the claim loop's wake-up: room, work, stop
        self._lock = threading.Lock()
        self._inflight: dict[str, Flight] = {}
        self._running = 0  # attempts claimed and not yet settled
        self.reserved = 0  # claims being made (see reserve)
        self._closed = False  # the claim loop has ended: no claim may start any more

    def __len__(self) -> int:
        with self._lock:
            return len(self._inflight)

    def all(self) -> list[Flight]:
        with self._lock:
            return list(self._inflight.values())

    def snapshot(self) -> tuple[dict[str, int], int]:
        """(the counters, attempts in flight) at one moment: for the heartbeat."""
        with self._lock:
            return dict(self.counters), len(self._inflight)

    def reserve(self, most: int, stopping: bool) -> int:
        """Reserve room for up to `most` claims about to be made; how many were reserved.
        Give it back with `unreserve`."""
        with self._lock:
            if self._closed or stopping:
                return 0
            free = self.concurrency - self._running - self.reserved
            if self.max_activities is not None:
                free = min(free, self.max_activities - self.counters["claimed"] - self.reserved)
            granted = max(0, min(free, most))
            self.reserved += granted
            return granted

    def unreserve(self, count: int) -> None:
        with self._lock:
            self.reserved -= count

    @property
    def running(self) -> int:
        """Attempts claimed and not yet settled (the slots they hold)."""
        return self._running

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """No claim may start any more (a slot, or an abandoned handler's thread)."""
        with self._lock:
            self._closed = True

    def add(self, flight: Flight) -> None:
        """A claimed attempt starts: counted as running before its reservation is given
        back (in between, the room would be counted nowhere)."""
        with self._lock:
            self._inflight[flight.claim.lease_id] = flight
            self.counters["claimed"] += 1
            self._running += 1

    def take(self, flight: Flight) -> bool:
        """Become the one that settles this attempt; False if another already did."""
        with flight.lock:
            if flight.settled:
                return False
            flight.settled = True
        with self._lock:
            self._running -= 1
        return True

    def drop(self, flight: Flight) -> None:
        with self._lock:
            self._inflight.pop(flight.claim.lease_id, None)

    def forget(self, flight: Flight) -> None:
        """Drop an attempt that ended without its handler (claim lost, released)."""
        flight.ctx.stopping.set()  # ctx.should_stop, for a handler still running
        self.drop(flight)
        self.wake.set()

    def count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1


class Slots:
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
        try:
            while True:
                fn, args = self._tasks.get()
                try:
                    fn(*args)
                except BaseException as exc:  # the task settles its own attempts (claiming.py);
                    # this thread lives on for the next one
                    log.error("a handler slot failed", extra=details(error=describe(exc)))
                finally:
                    with self._lock:
                        self.busy -= 1
                    # Wake the claim loop only now: woken earlier, it would still see
                    # this slot busy and sleep a whole poll interval.
                    self._on_free()
        finally:  # a thread that died anyway is replaced by the next submit
            with self._lock:
                self._threads -= 1

"""Riding out an outage: how every long-running command waits for a server that went away.

A primary election takes seconds, a restart longer, and a server can stall without
closing anything (stopped, swapping, a disk or a lock that holds it): its commands time
out. A one-shot command fails at once with its exit code (6, unavailable); a
long-running one (`stats --watch`, `wait`, `metrics serve`, the console, `tail events`)
is worth more alive: once the server has answered it, a failure that says the server is
away or stalled (`Unavailable`, `TimedOut` included, not a refusal of the credentials) is
shown (since when, retrying) and the same read is tried again, backing off, until the
server is back; then the command carries on and says so.

`OutageWatch` is that one mechanism. `call(read)` retries a read through an outage
(the loops of `stats --watch` and `wait`); `failed(exc)` and `succeeded()` report
what a caller that retries by itself saw (a scrape, a console request, the tail's
reconnect). The callbacks are the front end's: the backend knows no terminal.

Pure: no server; the clock and the sleep are parameters (tests give their own).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from runnerq_cli.errors import TimedOut, Unavailable
from runnerq_cli.plural import counted

T = TypeVar("T")
RETRY_DELAYS = (0.5, 1.0, 2.0, 5.0)  # seconds between tries; the last one repeats


def is_away(exc: BaseException) -> bool:
    """Whether `exc` says the server is away (worth waiting for), not that it refused.

    A server that stopped answering midway (`TimedOut`: its port open, no answer within
    the socket or the connect timeout) is away too for a command that rides outages out:
    it is reachable, so a one-shot command is told to ask less at once (the CLI's advice)
    rather than to start a server, but a long-running view that waits sees it answer
    again as a stopped process answers once continued. Only refused credentials are not
    worth waiting for."""
    return isinstance(exc, Unavailable) and (not exc.reachable or isinstance(exc, TimedOut))


def unavailable_line(exc: Unavailable, now: datetime | None = None) -> str:
    """What a front end that retries by request (the console) says of `exc`: the server
    is away, since when (the driver boundary's `since`), and that asking again is the
    way on. No URI: the error's own text is for logs."""
    if not is_away(exc) or exc.since is None:  # refused, or away before it ever answered
        return "the database is unavailable"
    seconds = ((now or datetime.now(UTC)) - exc.since).total_seconds()
    return (f"the database is unavailable since {exc.since:%H:%M:%S} UTC "
            f"({max(0.0, seconds):.0f} s): retrying")


@dataclass
class Outage:
    """One outage as a command saw it: since when (UTC), how many tries failed, the last
    error's one line."""

    since: datetime
    started: float  # the monotonic clock at the first failure (durations)
    attempts: int = 1
    error: str = ""
    ended: float | None = field(default=None)  # the monotonic clock when it answered again

    def seconds(self, now: float | None = None) -> float:
        end = self.ended if self.ended is not None else (
            time.monotonic() if now is None else now)
        return max(0.0, end - self.started)

    @property
    def next_delay(self) -> float:
        return RETRY_DELAYS[min(self.attempts - 1, len(RETRY_DELAYS) - 1)]

    def away_line(self, now: float | None = None) -> str:
        """`the server is away since 01:02:03 UTC (8 s, 3 tries), retrying: <error>`."""
        tries = f", {counted(self.attempts, 'try')}" if self.attempts > 1 else ""
        error = f": {self.error}" if self.error else ""
        return (f"the server is away since {self.since:%H:%M:%S} UTC "
                f"({self.seconds(now):.0f} s{tries}), retrying{error}")

    def back_line(self) -> str:
        """`the server is back after 8 s (away since 01:02:03 UTC)`."""
        return (f"the server is back after {self.seconds():.0f} s "
                f"(away since {self.since:%H:%M:%S} UTC)")


class OutageWatch:
    """A long-running command's view of its server: away (an `Outage`) or not.

    `on_away(outage)` is called at each failed try (the first one starts the outage),
    `on_back(outage)` once when the server answers again. Until the server has answered
    this watch once (`answered`), a failure is not an outage but the command's own
    failure at start: it is raised, so a server unreachable at start still exits 6 at once.
    """

    def __init__(self, on_away: Callable[[Outage], None] | None = None,
                 on_back: Callable[[Outage], None] | None = None, *, answered: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], bool] | None = None) -> None:
        self.on_away = on_away
        self.on_back = on_back
        self.answered = answered
        self.outage: Outage | None = None
        self._clock = clock
        self._stop = threading.Event()
        # sleep(seconds) -> True when stopped meanwhile
        self._sleep = sleep or self._stop.wait
        self._lock = threading.Lock()

    @property
    def away(self) -> bool:
        return self.outage is not None

    def stop(self) -> None:
        """End a `call` that is waiting out an outage (from a signal handler or a thread)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def failed(self, exc: BaseException) -> Outage:
        """Record a failed try; raises `exc` when it is no outage (a refusal, any other
        error, or a server that never answered this watch)."""
        if not (self.answered and is_away(exc)):
            raise exc
        from runnerq_cli.redaction import redact_uri

        error = " ".join(redact_uri(str(exc)).split())[:300]
        with self._lock:
            if self.outage is None:
                since = exc.since if isinstance(exc, Unavailable) and exc.since else None
                # A stall is found a timeout after it began: dated, and timed, from then.
                lead = (exc.seconds or 0.0) if isinstance(exc, TimedOut) else 0.0
                since = since or datetime.now(UTC) - timedelta(seconds=lead)
                self.outage = Outage(since, self._clock() - lead, error=error)
            else:
                self.outage.attempts += 1
                self.outage.error = error
            outage = self.outage
        if self.on_away is not None:
            self.on_away(outage)
        return outage

    def succeeded(self) -> None:
        """The server answered: the outage, if any, is over (`on_back` is told)."""
        with self._lock:
            self.answered = True
            outage, self.outage = self.outage, None
        if outage is not None:
            outage.ended = self._clock()
            if self.on_back is not None:
                self.on_back(outage)

    def call(self, read: Callable[[], T], *, until: float | None = None) -> T | None:
        """`read()`, tried again through an outage (backing off, RETRY_DELAYS) until it
        answers; None when `stop()` ended the wait first, or when the monotonic clock
        passed `until` (a caller's own deadline: `wait --timeout`). Errors that are no
        outage raise."""
        while not self._stop.is_set():
            try:
                value = read()
            except Unavailable as exc:
                outage = self.failed(exc)
                pause = outage.next_delay
                if until is not None:
                    left = until - self._clock()
                    if left <= 0:
                        return None
                    pause = min(pause, left)
                if self._sleep(pause):
                    return None
                continue
            self.succeeded()
            return value
        return None

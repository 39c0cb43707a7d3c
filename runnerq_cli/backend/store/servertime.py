"""The server's clock: every time that decides what runs when is the server's.

A host whose clock is minutes off must behave exactly as one with a true
clock (docs/design.md, "Time"): a lease deadline written by a worker 5
minutes behind would expire 5 minutes early and let a second worker run the
handler; a back-off computed by it would be 5 minutes in the past. So:

- **Times written** (lease deadlines, back-off, delays, a failure's
  `completed_at`, stored events' timestamps) are computed by the server as
  the write lands: the code puts a `ServerTime` marker (`SERVER_NOW`, or
  `SERVER_NOW + timedelta(...)`) where the time goes, and `server_update`
  turns an update holding markers into an update pipeline with `$$NOW`
  (`{$add: ["$$NOW", ms]}`, built by update_pipelines.py). In a pipeline every
  value that could be read as an expression is wrapped in `$literal`: a payload,
  metadata or reason such as "$name" is stored as written, never read as a
  field path or an operator.
  Only those: a number, date, id or a string not starting with "$" means
  itself bare, and a claim or a failure is one update command on every
  activity, so its bytes count (benchmarks/README.md).
- **Times compared** (the reaper's and the scheduler's "now", retention
  cut-offs, windows) are the server's too, read through `ServerClock`: the
  server's `hello.localTime`, asked at most once a minute and carried
  forward by this host's monotonic clock, so a filter stays a plain
  `{$lte: <date>}` that the partial indexes serve. Its error is half a round
  trip (plus the monotonic clock's drift within a minute); the reaper's own
  fence adds an exact `$expr` against `$$NOW` (`past_now`).

A backend built with a clock of its own (tests, simulations:
`RunnerQ(settings, clock=...)`) keeps time travel: the code then writes that
clock's `now` (a datetime, no marker) and compares with it, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.write_times import SERVER_NOW as SERVER_NOW  # re-exported
from runnerq_cli.backend.domain.write_times import ServerTime as ServerTime  # re-exported
from runnerq_cli.backend.domain.write_times import When as When  # re-exported
from runnerq_cli.backend.domain.write_times import (  # re-exported
    has_server_times as has_server_times,
)

if TYPE_CHECKING:
    from runnerq_cli.backend.store.driver import Database

log = logging.getLogger("runnerq.backend")

# How long a measurement of the server's clock is trusted (then `hello` is asked again).
REFRESH_SECONDS = 60.0


def utc_now() -> datetime:
    """Now, truncated to milliseconds: what MongoDB stores, so values compare equal."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def server_stamps(clock: Callable[[], datetime]) -> bool:
    """Whether the server sets the times written: yes on the default clock (`ServerClock`),
    or a clock that says so (`clock.server_stamps = True`); a clock of the caller's own
    (tests) writes its own times."""
    return bool(getattr(clock, "server_stamps", clock is utc_now))


def write_time(clock: Callable[[], datetime]) -> When:
    """What a write sets as "now": the server's (a marker), or the caller's clock's."""
    return SERVER_NOW if server_stamps(clock) else clock()


def past_now(clock: Callable[[], datetime], field: str) -> dict[str, Any]:
    """A filter clause, for a write by `_id` (no index needed), true when `field` is past
    the server's clock as the write lands (`$expr` with `$$NOW`); on a clock of the
    caller's own, an empty clause (the caller compares with its own `now`)."""
    if not server_stamps(clock):
        return {}
    return {"$expr": {"$lt": [f"${field}", "$$NOW"]}}


# ------------------------------------------------------------------ updates


def server_update(update: Mapping[str, Any]) -> Any:
    """`update` as the server should run it: unchanged without markers; with `SERVER_NOW`
    only as plain `$set` values, the same operators with `$currentDate`; otherwise an
    update pipeline computing each marked time from `$$NOW`, every other value in
    `$literal` (update_pipelines.py: loaded only for such an update, so a plain enqueue
    does not compile it)."""
    if not has_server_times(update):
        return update
    plain = {op: fields for op, fields in update.items() if op != "$set"}
    sets = dict(update.get("$set", {}))
    now_fields = [k for k, v in sets.items() if v == SERVER_NOW]
    if not has_server_times(plain) and not has_server_times(
            {k: v for k, v in sets.items() if k not in now_fields}):
        for name in now_fields:
            sets.pop(name)
        out: dict[str, Any] = {**plain, "$currentDate": {
            **dict(plain.get("$currentDate", {})), **dict.fromkeys(now_fields, True)}}
        if sets:
            out["$set"] = sets
        return out
    from runnerq_cli.backend.store.update_pipelines import pipeline  # (only for these)

    return pipeline(update)


# -------------------------------------------------------------- the clock


class ServerClock:
    """The server's clock as this process sees it: `hello.localTime` measured at most once
    a minute (at the midpoint of the round trip) and carried forward by the monotonic
    clock, which no wall-clock step moves. Callable like any backend clock.

    Before a first measurement the server's error is raised (the operation that asked
    for the time needs the server anyway; this host's clock could reap live leases);
    a later measurement that fails keeps the last one. A server that does not report
    its clock leaves this host's.
    """

    server_stamps = True

    def __init__(self, db: Database, refresh: float = REFRESH_SECONDS) -> None:
        self._db = db
        self._refresh = refresh
        self._lock = threading.Lock()
        self._base: tuple[datetime, float] | None = None  # (server time, monotonic then)
        self._asked_at: float | None = None

    def __call__(self) -> datetime:
        mono = time.monotonic()
        if self._asked_at is None or mono - self._asked_at >= self._refresh:
            self._measure()
        base = self._base
        if base is None:
            now = datetime.now(UTC)
        else:
            now = base[0] + timedelta(seconds=time.monotonic() - base[1])
        return now.replace(microsecond=now.microsecond // 1000 * 1000)

    def offset(self) -> float | None:
        """The server's clock minus this host's, in seconds (None before a measurement)."""
        base = self._base
        if base is None:
            return None
        server = base[0] + timedelta(seconds=time.monotonic() - base[1])
        return (server - datetime.now(UTC)).total_seconds()

    def _measure(self) -> None:
        with self._lock:
            mono = time.monotonic()
            if self._asked_at is not None and mono - self._asked_at < self._refresh:
                return  # another thread just did
            try:
                reply = self._db.command("hello")
            except Exception:
                if self._base is None:
                    raise  # never measured: this host's clock could reap live leases
                log.debug("server clock not measured again; the last measurement stays")
                self._asked_at = mono
                return
            after = time.monotonic()
            self._asked_at = mono
            value = reply.get("localTime")
            if not isinstance(value, datetime):
                log.warning("the server does not report its clock (hello.localTime): "
                            "times are compared by this host's clock")
                return
            if value.tzinfo is None:
                value = value.replace(tzinfo=UTC)
            self._base = (value, (mono + after) / 2)

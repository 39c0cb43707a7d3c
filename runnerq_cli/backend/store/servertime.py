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
  (`{$add: ["$$NOW", ms]}`). In a pipeline every value that could be read as
  an expression is wrapped in `$literal`: a payload, metadata or reason such
  as "$name" is stored as written, never read as a field path or an operator.
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
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from bson import Decimal128, ObjectId

from runnerq_cli.backend.domain.write_times import SERVER_NOW as SERVER_NOW  # re-exported
from runnerq_cli.backend.domain.write_times import ServerTime as ServerTime  # re-exported
from runnerq_cli.backend.domain.write_times import When as When  # re-exported

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


def has_server_times(value: Any) -> bool:
    """Whether `value` holds a `ServerTime` anywhere (documents and lists walked)."""
    if isinstance(value, ServerTime):
        return True
    if isinstance(value, Mapping):
        return any(has_server_times(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_server_times(v) for v in value)
    return False


def server_update(update: Mapping[str, Any]) -> Any:
    """`update` as the server should run it: unchanged without markers; with `SERVER_NOW`
    only as plain `$set` values, the same operators with `$currentDate`; otherwise an
    update pipeline computing each marked time from `$$NOW`, every other value in
    `$literal`."""
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
    return pipeline(update)


def pipeline(update: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The update operators of `update` as an update pipeline (MongoDB 4.2+): `$set`,
    `$setOnInsert` (only under a guard no stored document matches: writes.stamped_inserts),
    `$currentDate`, `$inc`, `$min`, `$max`, `$push` (with `$each`), `$unset`.

    Every stage reads the document as it was before the update, like the operators."""
    fields: dict[str, Any] = {}
    unset: list[str] = []
    for op, spec in update.items():
        for path, value in spec.items():
            here = f"${path}"
            if op in ("$set", "$setOnInsert"):
                fields[path] = replacing(expression(value))
            elif op == "$currentDate":
                fields[path] = "$$NOW"
            elif op == "$inc":
                fields[path] = {"$add": [{"$ifNull": [here, 0]}, expression(value)]}
            elif op in ("$min", "$max"):  # both ignore a missing or null field
                fields[path] = {op: [here, expression(value)]}
            elif op == "$push":
                each = value["$each"] if isinstance(value, Mapping) and "$each" in value \
                    else [value]
                fields[path] = {"$concatArrays": [{"$ifNull": [here, []]},
                                                  [expression(v) for v in each]]}
            elif op == "$unset":
                unset.append(path)
            else:
                raise ValueError(f"no pipeline form for the update operator {op}")
    stages: list[dict[str, Any]] = [{"$set": fields}] if fields else []
    if unset:
        stages.append({"$unset": unset})
    return stages


def replacing(expr: Any) -> Any:
    """`expr` as the value of a `$set` stage's field that replaces what is stored there.

    At the top of a `$set` stage a plain document (no operator key) is a nested field
    spec, not a value: MongoDB merges it into the stored document (stale fields of an
    earlier `outbox.result` would survive) and applies it to each element of a stored
    array. `$mergeObjects` of that one document is an expression whose value is the
    document itself, which replaces the field whole. (The dev server replaces either
    way; tests/test_clock_skew.py checks the form, and on MongoDB the outcome.)"""
    if isinstance(expr, dict) and not any(key.startswith("$") for key in expr):
        return {"$mergeObjects": [expr]}
    return expr


def expression(value: Any) -> Any:
    """`value` as an aggregation expression: a marker's time from `$$NOW`, documents and
    lists that hold markers field by field (their keys are ours: event and outbox fields),
    and everything else exactly as written: bare if it reads as itself, else in
    `$literal`."""
    if isinstance(value, ServerTime):
        return value.expression()
    if isinstance(value, Mapping) and has_server_times(value):
        return {key: expression(v) for key, v in value.items()}
    if isinstance(value, list | tuple) and has_server_times(value):
        return [expression(v) for v in value]
    return value if reads_as_written(value) else {"$literal": value}


# Values an aggregation expression evaluates to themselves, whatever they hold.
_CONSTANTS = (type(None), bool, int, float, datetime, uuid.UUID, bytes, ObjectId, Decimal128)


def reads_as_written(value: Any) -> bool:
    """Whether `value`, bare in a pipeline, is stored exactly as written: null, a boolean,
    a number, a date, a UUID, binary, an ObjectId, a string that does not start with "$"
    (that is a field path, or a variable with "$$"), or a list of those. Never a
    document: its `$` keys would be operators, and in a `$set` stage a document is a
    nested field spec, merged into the stored document instead of replacing it. Any
    other type is wrapped too (what the server makes of it is not this module's to
    guess)."""
    if isinstance(value, str):
        return not value.startswith("$")
    if isinstance(value, list | tuple):
        return all(reads_as_written(item) for item in value)
    return isinstance(value, _CONSTANTS)


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

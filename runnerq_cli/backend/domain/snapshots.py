"""The typed shapes of the stats snapshot and the metrics sample (issue 26: typed contracts).

`metrics.py` builds them, the CLI (`stats`, its `--check` names) and the
Prometheus exposition read them: TypedDicts, so every key either side uses is
checked by mypy while the JSON a script reads (docs/reference.md, "Stats JSON")
is the dict itself, unchanged.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from runnerq_cli.backend.domain.models import Status

REPORTED_STATUSES = tuple(s.value for s in Status)
PERCENTILES = (50, 95, 99)


class OldestPending(TypedDict):
    activity_id: str
    activity_type: str | None
    created_at: str | None
    age_seconds: float


class MinuteOutcomes(TypedDict):
    minutes_ago: int
    completed: int
    failed: int
    dead_letter: int


class Throughput(TypedDict):
    window_minutes: int  # the window asked for
    covered_seconds: float  # what it really covers: not before the queue's first activity
    completed: int
    failed: int
    dead_letter: int
    completed_per_minute: float  # over covered_seconds
    failed_per_minute: float  # failed and dead-lettered, over covered_seconds
    per_minute: list[MinuteOutcomes]


class Percentiles(TypedDict):
    count: int
    p50: float | None
    p95: float | None
    p99: float | None


class Latency(TypedDict):
    window_seconds: float
    sample_cap: int
    capped: bool
    queue_wait_seconds: Percentiles  # due -> claimed
    run_seconds: Percentiles  # claimed -> finished as recorded (the handler and the ack)


class TypeHistory(TypedDict):
    completed: int
    failed: int
    dead_letter: int
    per_bucket: list[int]
    run_p50: list[float | None]
    run_p95: list[float | None]


class History(TypedDict):
    since_seconds: float
    bucket_seconds: float
    buckets: int
    sample_cap: int
    capped: bool
    by_type: dict[str, TypeHistory]


class Workers(TypedDict):
    live: int
    stale: int
    in_flight: int


class StatsSnapshot(TypedDict):
    schema: str
    queue: str
    generated_at: str
    total: int
    by_status: dict[str, int]
    estimated: list[str]  # the counts that are estimates (none while the queue is small)
    by_priority: dict[str, dict[str, int]]
    by_type: dict[str, dict[str, int]] | None
    oldest_pending: OldestPending | None
    throughput: Throughput
    latency: Latency
    history: History | None
    workers: Workers
    malformed: list[str]
    pause: NotRequired[dict[str, Any]]  # added by the CLI: control.PauseState.to_json()
    schedules: NotRequired[dict[str, Any]]  # added by the CLI: ScheduleViews.summary()
    limits: NotRequired[list[dict[str, Any]]]  # added by the CLI: FlowLimits.summary()


class CountRow(TypedDict):
    status: str
    priority: str
    type: str
    count: int


class MetricsSample(TypedDict):
    queue: str
    activities: list[CountRow]
    estimated: dict[str, int]
    oldest_pending_age_seconds: float
    window_seconds: float
    finished: dict[str, int]
    latency: Latency
    workers: Workers
    paused: bool  # the whole queue
    paused_types: list[str]
    known_types: list[str]  # types with a count or a pause: a 0 series is kept for each
    exact_statuses: list[str]  # the statuses runnerq_activities counts exactly
    malformed: int
    # {index: reads this process ran without their refused hint} (store/hints.py):
    # process-wide, the same in every queue's sample
    hint_fallbacks: dict[str, int]
    schedules: NotRequired[list[dict[str, Any]]]  # added by the front end: ScheduleViews.series()
    limits: NotRequired[list[dict[str, Any]]]  # added by the front end: FlowLimits.summary()


def percentiles(summary: Percentiles) -> dict[int, float | None]:
    """A summary's percentiles by number (the names a loop over them needs)."""
    return {50: summary["p50"], 95: summary["p95"], 99: summary["p99"]}


# `stats --check`: the names an expression may use, and their values in a snapshot.
# The schedules' numbers a --check may name (`schedules_late == 0`): stats' `schedules`.
SCHEDULE_CHECKS = ("count", "paused", "late", "problems", "ended", "missed_fires")
CHECK_NAMES = frozenset(
    {*REPORTED_STATUSES, "running", "dead-letter", "total", "oldest_pending",
     "completed_per_minute", "failed_per_minute", "workers", "stale_workers", "in_flight",
     "malformed", *(f"{prefix}_p{p}" for prefix in ("wait", "run") for p in PERCENTILES),
     *(f"schedules_{key}" for key in SCHEDULE_CHECKS)})
# The check names in seconds (a value may be a duration: 60s, 5m); the others are counts
# and rates, compared with a plain number.
CHECK_DURATIONS = frozenset(
    {"oldest_pending", *(f"{prefix}_p{p}" for prefix in ("wait", "run") for p in PERCENTILES)})


def check_values(snap: StatsSnapshot) -> dict[str, float]:
    """The flat names a `--check` expression may use, in seconds or counts."""
    values: dict[str, float] = {name: float(n) for name, n in snap["by_status"].items()}
    values["running"] = values.get("processing", 0.0)
    values["dead-letter"] = values.get("dead_letter", 0.0)
    values["total"] = float(snap["total"])
    oldest = snap["oldest_pending"]
    values["oldest_pending"] = float(oldest["age_seconds"]) if oldest else 0.0
    tp = snap["throughput"]
    values["completed_per_minute"] = float(tp["completed_per_minute"])
    values["failed_per_minute"] = float(tp["failed_per_minute"])
    lat = snap["latency"]
    for prefix, summary in (("wait", lat["queue_wait_seconds"]), ("run", lat["run_seconds"])):
        for p, value in percentiles(summary).items():
            values[f"{prefix}_p{p}"] = float(value) if value is not None else 0.0
    values["workers"] = float(snap["workers"]["live"])
    values["stale_workers"] = float(snap["workers"]["stale"])
    values["in_flight"] = float(snap["workers"]["in_flight"])
    values["malformed"] = float(len(snap["malformed"]))
    schedules = snap.get("schedules") or {}
    for key in SCHEDULE_CHECKS:
        values[f"schedules_{key}"] = float(schedules.get(key) or 0)
    return values

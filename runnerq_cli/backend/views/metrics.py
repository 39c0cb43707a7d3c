"""The `stats` snapshot: counts, oldest pending, throughput, latency, history, workers.

Everything is computed on the server; the client receives a few numbers per
query, never activities. What one read costs does not grow with the finished
history a queue keeps (docs/cli.md, "What each stats query costs", says the
same for users):

- live states (pending, scheduled, processing): exact, one covered `$group`
  per state on its partial index (index keys only): O(live work);
- failed, dead_letter, cancelled: exact, one covered `$group` per status on
  the finished index, which leads with `status`, so each reads only its own
  status's keys: O(failed + dead-lettered + cancelled kept);
- completed: exact while at most `EXACT_COMPLETED_UP_TO` (10,000) are kept, one
  covered `$group` that stops reading after that many keys; past it an ESTIMATE,
  the collection's document count (metadata, O(1)) minus every exact count,
  clamped at 0, listed in `estimated` with the total (and then not counted by
  priority or type, which would read every completed activity);
- oldest pending: one indexed seek on the claim-order index;
- throughput, latency, history: the finished index's `completed_at` range
  of the window shown: O(finished in the window), latency samples capped; the
  history's failures from the stored failure events (failures.py), which a retry
  does not erase; throughput's per-minute rates over the time the window really
  covers (not before the queue's first activity: one seek on `created_at_1`).

A malformed document (a date that is not a date, a worker entry with text
where a number belongs) is skipped and counted (`malformed`), never a crash. The
malformed activities are counted as doctor's `documents` check finds them, with
those set aside as malformed (`malformed_activities`): the one part that reads
documents, at most SHAPE_SCAN_LIMIT per status (docs/cli.md says so too).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.domain.models import LIVE_STATUSES as LIVE
from runnerq_cli.backend.domain.models import Priority, Status, to_jsonable
from runnerq_cli.backend.domain.queries import (
    EXACT_COMPLETED_UP_TO,
    EXACT_FINISHED,
    TERMINAL_DONE,
    completed_counts,
    completions_since,
    failure_events_since,
    finished_since,
    first_created,
    status_counts,
)
from runnerq_cli.backend.domain.snapshots import (
    PERCENTILES,
    REPORTED_STATUSES,
    CountRow,
    History,
    Latency,
    MetricsSample,
    MinuteOutcomes,
    OldestPending,
    Percentiles,
    StatsSnapshot,
    Throughput,
    TypeHistory,
    Workers,
)
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.hints import fallbacks as hint_fallbacks
from runnerq_cli.backend.store.indexes import index_name
from runnerq_cli.config import Settings

if TYPE_CHECKING:
    from runnerq_cli.backend.domain.pause import PauseState

SCHEMA = "runnerq.stats/2"
LIVE_STATUSES = tuple(s.value for s in LIVE)

EXACT_STATUSES = (*LIVE_STATUSES, *EXACT_FINISHED)
# The counts that are estimates past EXACT_COMPLETED_UP_TO completed activities (every
# other count is always exact); `total` includes them.
ESTIMATED = ("completed", "total")
HISTORY_BUCKETS = 20  # sparkline points: 20 x 3 minutes for the last hour


@dataclass(frozen=True)
class StatsOptions:
    by_type: bool = False
    throughput_minutes: int = 5
    latency_window_seconds: float = 900.0
    sample_cap: int = 10_000
    stale_after: float = TIMING.worker_stale_after
    history_seconds: float | None = None  # --since / --watch: the history section's window


def _rank(name: str) -> int:
    """Critical first, unknown priorities last."""
    member = Priority.__members__.get(name.upper())
    return -member.value if member is not None else 0


def _hinted(collection: Any, pipeline: list[dict[str, Any]],
            index: str) -> list[dict[str, Any]]:
    """Run `pipeline` on `index` (a covered index scan: no document is read).

    Without the hint a `$group` with no `$match` would scan the collection. Where the
    index is missing (indexes not created yet) the read runs without it, counted and
    logged once (store/hints.py).
    """
    from runnerq_cli.backend.store.hints import hinted_aggregate

    return hinted_aggregate(collection, pipeline, index)


# The index pending counts by type are hinted to (its keys lead with the type).
PENDING_BY_TYPE_PURPOSE = "claims limited"


def count_queries(settings: Settings) -> list[tuple[dict[str, Any], str]]:
    """(match, index) pairs giving every EXACT count, each from index keys only
    (queries.status_counts: the live states from their own partial indexes; failed,
    dead_letter and cancelled from the finished index with the status as its first
    key, so a count reads that status's keys and no completed activity's)."""
    return [(query.filter, index_name(settings, str(query.purpose))) for query in status_counts()]


@dataclass(frozen=True)
class Counted:
    """Exact count rows {status, <fields>..., count}, and whether completed is among them."""

    rows: list[dict[str, Any]]
    completed_exact: bool


def _grouped(ctx: QueueContext, fields: dict[str, str], *,
             by_type_index: bool = False) -> Counted:
    """Every exact count, grouped by status and `fields`; completed too while at most
    EXACT_COMPLETED_UP_TO are kept (its $group stops reading after one more)."""
    queries = count_queries(ctx.settings)
    if by_type_index:  # pending by type: the index that leads with the type
        queries[0] = (queries[0][0], index_name(ctx.settings, PENDING_BY_TYPE_PURPOSE))
    bounded = completed_counts(EXACT_COMPLETED_UP_TO + 1)
    runs: list[tuple[dict[str, Any], str, list[dict[str, Any]]]] = [
        (match, index, []) for match, index in queries]
    runs.append((bounded.filter, str(bounded.index(ctx.settings)),
                 [stage for stage in bounded.pipeline or () if "$limit" in stage]))
    rows: list[dict[str, Any]] = []
    for match, index, head in runs:
        pipeline = [{"$match": match}, *head,
                    {"$group": {"_id": {"status": "$status", **fields, **_kinds(fields)},
                                "count": {"$sum": 1}}}]
        for row in _hinted(ctx.activities, pipeline, index):
            key = row["_id"] if isinstance(row.get("_id"), dict) else {}
            rows.append({**{name: _kept(key, name) for name in fields},
                         "status": str(key.get("status")), "count": int(row["count"])})
    completed = Status.COMPLETED.value
    exact = sum(r["count"] for r in rows if r["status"] == completed) <= EXACT_COMPLETED_UP_TO
    return Counted(rows if exact else [r for r in rows if r["status"] != completed], exact)


def _kinds(fields: dict[str, str]) -> dict[str, Any]:
    """The BSON type of a grouped priority beside it: `$group` puts 2 and 2.0 in one group
    (equal numbers), and a double priority is malformed (docs/design.md), never normal."""
    return {"priority_type": {"$type": "$priority"}} if "priority" in fields else {}


def _kept(key: dict[str, Any], name: str) -> Any:
    """A grouped value; a priority of a type other than an integer as None (malformed)."""
    if name == "priority" and key.get("priority_type", "int") not in ("int", "long"):
        return None
    return key.get(name)


def estimated_total(ctx: QueueContext) -> int:
    """Every document of the activities collection, from its metadata (O(1), not exact:
    MongoDB keeps it per collection and may be off after an unclean shutdown)."""
    return int(ctx.activities.estimated_document_count())


def completed_count(ctx: QueueContext, counted: Counted) -> int:
    """Completed activities: exact from the rows, or past EXACT_COMPLETED_UP_TO the
    collection's count minus every exact count (>= 0)."""
    completed = Status.COMPLETED.value
    if counted.completed_exact:
        return sum(int(r["count"]) for r in counted.rows if r["status"] == completed)
    return max(0, estimated_total(ctx) - sum(int(r["count"]) for r in counted.rows))


def counts(ctx: QueueContext) -> tuple[dict[str, int], dict[str, dict[str, int]], list[str]]:
    """(by_status, by_priority, the counts that are estimates). Exact but for `completed`
    past EXACT_COMPLETED_UP_TO (then ESTIMATED, and left out of by_priority).
    Cost: O(live + failed + dead-lettered + cancelled + min(completed, the bound))."""
    counted = _grouped(ctx, {"priority": "$priority"})
    by_status = dict.fromkeys(REPORTED_STATUSES, 0)
    by_priority: dict[str, dict[str, int]] = {}
    for row in counted.rows:
        status = row["status"]
        by_status[status] = by_status.get(status, 0) + row["count"]
        per = by_priority.setdefault(Priority.label(row["priority"]), {})
        per[status] = per.get(status, 0) + row["count"]
    by_status[Status.COMPLETED.value] = completed_count(ctx, counted)
    return by_status, by_priority, [] if counted.completed_exact else list(ESTIMATED)


def counts_by_type(ctx: QueueContext) -> dict[str, dict[str, int]]:
    """Exact counts by type and status (completed left out past EXACT_COMPLETED_UP_TO)."""
    out: dict[str, dict[str, int]] = {}
    for row in _grouped(ctx, {"type": "$activity_type"}, by_type_index=True).rows:
        per = out.setdefault(str(row["type"]), {})
        per[row["status"]] = per.get(row["status"], 0) + row["count"]
    return dict(sorted(out.items()))


def oldest_pending(ctx: QueueContext, now: datetime) -> OldestPending | None:
    """One seek per priority on the claim-order index (the four ranges merged:
    queries.oldest_pending). A stray pending document whose `created_at` is not a
    date is outside the query's range (doctor's `documents` check names it)."""
    from runnerq_cli.backend.domain.queries import oldest_pending as named

    query = named()
    doc = ctx.activities.find_one(query.filter, {"_id": 1, "created_at": 1, "activity_type": 1},
                                  sort=query.sort_list)
    if doc is None:
        return None
    age = max(0.0, (now - doc["created_at"]).total_seconds())
    return {"activity_id": str(doc["_id"]), "activity_type": doc.get("activity_type"),
            "created_at": to_jsonable(doc["created_at"]), "age_seconds": round(age, 3)}


MIN_COVERED_SECONDS = 10.0  # a rate over less than this would swing with every activity


def covered_seconds(ctx: QueueContext, now: datetime, seconds: float) -> float:
    """How much of the last `seconds` the queue had work: the window, but not before its
    first activity kept (2/s for 80 s on a new queue is 120/min, not 32/min over 5 min);
    at least MIN_COVERED_SECONDS."""
    query = first_created()
    doc = ctx.activities.find_one(query.filter, {"created_at": 1}, sort=query.sort_list)
    first = doc.get("created_at") if doc else None
    if not isinstance(first, datetime):
        return seconds
    return max(min(MIN_COVERED_SECONDS, seconds), min(seconds, (now - first).total_seconds()))


def throughput(ctx: QueueContext, now: datetime, minutes: int) -> Throughput:
    """Outcomes of the last `minutes`, and their rates over the time the window covers."""
    pipeline = [
        finished_since(now - timedelta(minutes=minutes)).match_stage,
        {"$group": {"_id": {"status": "$status", "minute": {"$floor": {"$divide": [
            {"$subtract": [now, "$completed_at"]}, 60_000]}}}, "count": {"$sum": 1}}},
    ]
    per_minute = [dict.fromkeys(TERMINAL_DONE, 0) for _ in range(minutes)]
    totals = dict.fromkeys(TERMINAL_DONE, 0)
    for row in ctx.activities.aggregate(pipeline):
        status = row["_id"]["status"]
        minute = max(0, int(row["_id"]["minute"] or 0))  # a writer's clock ahead: now
        totals[status] = totals.get(status, 0) + row["count"]
        if 0 <= minute < minutes:
            per_minute[minute][status] = per_minute[minute].get(status, 0) + row["count"]
    minutes_rows: list[MinuteOutcomes] = [
        {"minutes_ago": m, "completed": row[Status.COMPLETED.value],
         "failed": row[Status.FAILED.value], "dead_letter": row[Status.DEAD_LETTER.value]}
        for m, row in enumerate(per_minute)]
    covered = covered_seconds(ctx, now, minutes * 60.0)
    completed = totals[Status.COMPLETED.value]
    failed = totals[Status.FAILED.value] + totals[Status.DEAD_LETTER.value]
    return {
        "window_minutes": minutes,
        "covered_seconds": round(covered, 3),
        "completed": completed,
        "failed": totals[Status.FAILED.value],
        "dead_letter": totals[Status.DEAD_LETTER.value],
        "completed_per_minute": round(completed * 60.0 / covered, 3),
        "failed_per_minute": round(failed * 60.0 / covered, 3),
        "per_minute": minutes_rows,
    }


def _date_diff(later: Any, earlier: Any) -> dict[str, Any]:
    """`later - earlier` in ms on the server, null unless both are dates (a malformed
    document then drops out of the sample instead of failing the whole query)."""
    return {"$cond": [{"$and": [{"$eq": [{"$type": later}, "date"]},
                                {"$eq": [{"$type": earlier}, "date"]}]},
                      {"$subtract": [later, earlier]}, None]}


WAIT_MS = _date_diff("$started_at", {"$ifNull": ["$scheduled_at", "$created_at"]})
RUN_MS = _date_diff("$completed_at", "$started_at")


def _picks(percentiles: tuple[int, ...]) -> dict[str, Any]:
    """Nearest rank, as docs/cli.md says: the p-th percentile of n sorted values is the
    value at rank ceil(n * p / 100) (1-based): the p95 of 7.6, 11.3 and 14.6 is 14.6."""
    return {f"p{p}": {"$arrayElemAt": ["$v", {"$max": [0, {"$subtract": [
        {"$toInt": {"$ceil": {"$divide": [{"$multiply": [{"$size": "$v"}, p]}, 100]}}},
        1]}]}]} for p in percentiles}


def _percentile_stage(field: str) -> list[dict[str, Any]]:
    return [
        {"$match": {field: {"$ne": None}}},
        {"$sort": {field: 1}},
        {"$group": {"_id": None, "v": {"$push": f"${field}"}}},
        {"$project": {"_id": 0, "n": {"$size": "$v"}, **_picks(PERCENTILES)}},
    ]


def _seconds(ms: Any) -> float | None:
    return None if ms is None else round(max(0.0, float(ms) / 1000.0), 3)


def latency(ctx: QueueContext, now: datetime, window: float, cap: int) -> Latency:
    """Queue wait (due -> claimed) and run time (claimed -> finished as recorded: the
    handler, the worker's queueing of it and the acknowledgement), in seconds.

    Over terminal activities finished in the last `window` seconds, at most
    the newest `cap` of them; nearest-rank percentiles picked on the server.
    """
    finished = finished_since(now - timedelta(seconds=window))
    pipeline: list[dict[str, Any]] = [
        finished.match_stage,
        finished.sort_stage,
        {"$limit": cap},
        {"$project": {"wait": WAIT_MS, "run": RUN_MS}},
        {"$facet": {"wait": _percentile_stage("wait"), "run": _percentile_stage("run")}},
    ]
    rows = list(ctx.activities.aggregate(pipeline))
    facets = rows[0] if rows else {}

    def summary(name: str) -> Percentiles:
        found = (facets.get(name) or [{}])[0] if facets.get(name) else {}
        return {"count": int(found.get("n", 0)), "p50": _seconds(found.get("p50")),
                "p95": _seconds(found.get("p95")), "p99": _seconds(found.get("p99"))}

    wait, run = summary("wait"), summary("run")
    return {"window_seconds": window, "sample_cap": cap,
            "capped": max(wait["count"], run["count"]) >= cap,
            "queue_wait_seconds": wait, "run_seconds": run}


def history(ctx: QueueContext, now: datetime, seconds: float, cap: int,
            buckets: int = HISTORY_BUCKETS) -> History:
    """Per activity type over the last `seconds`: outcomes per bucket (oldest first) and
    the run time's p50/p95 per bucket.

    Completions from the activities finished in the window (index keys, covered);
    failures (failed, dead-lettered) from their stored events, so retrying an
    incident's dead letters does not erase it from the history. Activities removed
    by retention are no longer counted. Latency from the newest `cap` finished in
    the window (`capped` says when older buckets lack it).
    """
    since = now - timedelta(seconds=seconds)
    width_ms = seconds * 1000.0 / buckets
    finished = finished_since(since)
    match = finished.match_stage
    types: dict[str, TypeHistory] = {}

    def bucket_of(field: str) -> dict[str, Any]:
        return {"$floor": {"$divide": [{"$subtract": [field, since]}, width_ms]}}

    def entry(name: Any) -> TypeHistory:
        return types.setdefault(str(name), {
            "completed": 0, "failed": 0, "dead_letter": 0, "per_bucket": [0] * buckets,
            "run_p50": [None] * buckets, "run_p95": [None] * buckets})

    def slot(value: Any) -> int:
        return min(buckets - 1, max(0, int(value or 0)))  # a writer's clock ahead: newest

    def add(name: Any, outcome: str, at: Any, n: int) -> None:
        per = entry(name)
        if outcome == "completed":
            per["completed"] += n
        elif outcome == "failed":
            per["failed"] += n
        else:
            per["dead_letter"] += n
        per["per_bucket"][slot(at)] += n

    done = completions_since(since)
    completed = [*(done.pipeline or ()),
                 {"$group": {"_id": {"t": "$activity_type", "b": bucket_of("$completed_at")},
                             "count": {"$sum": 1}}}]
    for row in _hinted(ctx.activities, completed, str(done.index(ctx.settings))):
        add(row["_id"].get("t"), "completed", row["_id"].get("b"), int(row["count"]))
    events = failure_events_since(since)
    failed = [events.match_stage, {"$match": {"event_type": {"$in": ["Failed", "DeadLetter"]}}},
              {"$group": {"_id": {"t": "$activity_type", "e": "$event_type",
                                  "b": bucket_of("$timestamp")}, "count": {"$sum": 1}}}]
    for row in ctx.events.aggregate(failed):
        outcome = "failed" if row["_id"].get("e") == "Failed" else "dead_letter"
        add(row["_id"].get("t"), outcome, row["_id"].get("b"), int(row["count"]))
    sampled: list[dict[str, Any]] = [match, finished.sort_stage, {"$limit": cap},
               {"$project": {"t": "$activity_type", "b": bucket_of("$completed_at"),
                             "run": RUN_MS}},
               {"$match": {"run": {"$ne": None}}}, {"$sort": {"run": 1}},
               {"$group": {"_id": {"t": "$t", "b": "$b"}, "v": {"$push": "$run"}}},
               {"$project": {"n": {"$size": "$v"}, **_picks((50, 95))}}]
    sample_size = 0
    for row in ctx.activities.aggregate(sampled):
        key = row["_id"]
        per, i = entry(key.get("t")), slot(key.get("b"))
        sample_size += int(row.get("n", 0))
        per["run_p50"][i] = _seconds(row.get("p50"))
        per["run_p95"][i] = _seconds(row.get("p95"))
    return {"since_seconds": seconds, "bucket_seconds": seconds / buckets, "buckets": buckets,
            "sample_cap": cap, "capped": sample_size >= cap,
            "by_type": dict(sorted(types.items()))}


def worker_summary(ctx: QueueContext, now: datetime, stale_after: float,
                   malformed: list[str] | None = None) -> Workers:
    """Live and stale worker processes and what the live ones run, from the registry.

    Reads only the fields it needs; an entry whose heartbeat is not a date or whose
    `in_flight` is not a number is noted in `malformed` (a heartbeat that is not a date
    is stale, a bad `in_flight` counts 0).
    """
    live = stale = in_flight = 0
    cutoff = now - timedelta(seconds=stale_after)
    for doc in ctx.workers.find({}, {"last_heartbeat": 1, "started_at": 1, "in_flight": 1}):
        last = doc.get("last_heartbeat") or doc.get("started_at")
        running = doc.get("in_flight", 0)
        bad = []
        if last is not None and not isinstance(last, datetime):
            bad.append("last_heartbeat is not a date")
        if isinstance(running, bool) or not isinstance(running, int | float):
            bad.append("in_flight is not a number")
            running = 0
        if bad and malformed is not None:
            malformed.append(f"workers {doc.get('_id')!r}: " + ", ".join(bad))
        if isinstance(last, datetime) and last >= cutoff:
            live += 1
            in_flight += int(running)
        else:
            stale += 1
    return {"live": live, "stale": stale, "in_flight": in_flight}


# How long a snapshot reuses the shape scan (stats --watch, metrics serve): it reads up to
# SHAPE_SCAN_LIMIT documents per status, far more than the rest of a snapshot, so a view
# repeated every 2 s pays it once a minute (docs/cli.md says the count may lag that much).
MALFORMED_SCAN_EVERY = 60.0


def malformed_activities(ctx: QueueContext) -> list[str]:
    """What `stats` counts as malformed activities (docs/design.md, "Malformed documents"):
    those of another shape than the table's, as doctor's `documents` check finds them
    (bounded the same way), and those set aside as malformed, each once; as
    `activities ID: problem` lines. Read afresh at most once per MALFORMED_SCAN_EVERY
    on one context (a one-shot `stats` reads it once)."""
    import time

    from runnerq_cli.backend.views import shape_scan

    cached = ctx.cached_reads.get("malformed")
    if cached is not None and time.monotonic() - cached[0] < MALFORMED_SCAN_EVERY:
        return list(cached[1])
    found = shape_scan.malformed_activities(ctx)
    found += shape_scan.set_aside_activities(ctx, exclude=[m.id for m in found])
    lines = [f"activities {m.id}: {m.problem}" for m in found]
    ctx.cached_reads["malformed"] = (time.monotonic(), lines)
    return list(lines)


def snapshot(ctx: QueueContext, options: StatsOptions) -> StatsSnapshot:
    """One stats snapshot with the stable schema `SCHEMA` (docs/reference.md: "Stats JSON")."""
    now = ctx.clock()
    malformed: list[str] = malformed_activities(ctx)
    by_status, by_priority, estimated = counts(ctx)
    return {
        "schema": SCHEMA,
        "queue": ctx.settings.queue,
        "generated_at": to_jsonable(now),
        "total": sum(by_status.values()),
        "by_status": by_status,
        "estimated": estimated,
        "by_priority": {name: by_priority[name] for name in sorted(by_priority, key=_rank)},
        "by_type": counts_by_type(ctx) if options.by_type else None,
        "oldest_pending": oldest_pending(ctx, now),
        "throughput": throughput(ctx, now, options.throughput_minutes),
        "latency": latency(ctx, now, options.latency_window_seconds, options.sample_cap),
        "history": (history(ctx, now, options.history_seconds, options.sample_cap)
                    if options.history_seconds else None),
        "workers": worker_summary(ctx, now, options.stale_after, malformed),
        "malformed": malformed,
    }


# ----------------------------------------------------------- Prometheus metrics
# One bounded set of queries per scrape and queue (exposition.py renders it): the
# exact counts' covered $groups, the collection's metadata count, one oldest-pending
# seek, one range on (status, completed_at) for the window's outcomes, the latency
# sample, and the worker registry.


@dataclass(frozen=True)
class MetricsOptions:
    window_seconds: float = 300.0  # outcomes and latency percentiles over this window
    sample_cap: int = 10_000
    stale_after: float = TIMING.worker_stale_after


def counts_by_status_priority_type(ctx: QueueContext) -> tuple[list[CountRow], Counted]:
    """[{status, priority, type, count}] of the exact statuses (EXACT_STATUSES, and
    completed while at most EXACT_COMPLETED_UP_TO), and the count they came from."""
    counted = _grouped(ctx, {"priority": "$priority", "type": "$activity_type"},
                       by_type_index=True)
    rows: list[CountRow] = [{"status": row["status"], "priority": Priority.label(row["priority"]),
                             "type": str(row["type"]), "count": row["count"]}
                            for row in counted.rows]
    return sorted(rows, key=lambda r: (r["status"], r["type"], r["priority"])), counted


def finished_in_window(ctx: QueueContext, now: datetime, seconds: float) -> dict[str, int]:
    """Activities that reached completed/failed/dead_letter in the last `seconds`."""
    pipeline: list[dict[str, Any]] = [
        finished_since(now - timedelta(seconds=seconds)).match_stage,
        {"$group": {"_id": "$status", "count": {"$sum": 1}}},
    ]
    out = dict.fromkeys(TERMINAL_DONE, 0)
    for row in ctx.activities.aggregate(pipeline):
        out[str(row["_id"])] = int(row["count"])
    return out


def metrics_sample(ctx: QueueContext, pause: PauseState, options: MetricsOptions) -> MetricsSample:
    """The numbers one scrape exposes for one queue (plain data, no exposition format).

    `known_types` are the types with any exact count or a pause: the exposition
    keeps a zero-valued series for each of them (a count that falls to 0 stays
    visible as 0 instead of vanishing).
    """
    now = ctx.clock()
    malformed: list[str] = malformed_activities(ctx)
    rows, counted = counts_by_status_priority_type(ctx)
    oldest = oldest_pending(ctx, now)
    paused_types = sorted(str(t) for t in pause.types) if pause.active else []
    return {
        "queue": ctx.settings.queue,
        "activities": rows,
        "estimated": {Status.COMPLETED.value: completed_count(ctx, counted)},
        "oldest_pending_age_seconds": oldest["age_seconds"] if oldest else 0.0,
        "window_seconds": options.window_seconds,
        "finished": finished_in_window(ctx, now, options.window_seconds),
        "latency": latency(ctx, now, options.window_seconds, options.sample_cap),
        "workers": worker_summary(ctx, now, options.stale_after, malformed),
        "paused": pause.active and pause.all,
        "paused_types": paused_types,
        "known_types": sorted({row["type"] for row in rows} | set(paused_types)),
        "exact_statuses": [*EXACT_STATUSES, *([Status.COMPLETED.value]
                                              if counted.completed_exact else [])],
        "malformed": len(malformed),
        "hint_fallbacks": hint_fallbacks(),
    }

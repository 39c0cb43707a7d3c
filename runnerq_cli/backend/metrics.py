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
- completed: an ESTIMATE, the collection's document count (metadata, O(1))
  minus every exact count, clamped at 0 (`ESTIMATED`); no count of completed
  activities by priority or type is made (that would read every one of them);
- oldest pending: one indexed seek on the claim-order index;
- throughput, latency, history: the finished index's `completed_at` range
  of the window shown: O(finished in the window), latency samples capped.

A malformed document (a date that is not a date, a worker entry with text
where a number belongs) is skipped and counted (`malformed`), never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.indexes import index_name
from runnerq_cli.backend.models import LIVE_STATUSES as LIVE
from runnerq_cli.backend.models import Priority, Status, to_jsonable
from runnerq_cli.backend.queries import (
    EXACT_FINISHED,
    TERMINAL_DONE,
    finished_since,
    status_counts,
)
from runnerq_cli.backend.timing import TIMING
from runnerq_cli.config import Settings

SCHEMA = "runnerq.stats/2"
REPORTED_STATUSES = tuple(s.value for s in Status)
LIVE_STATUSES = tuple(s.value for s in LIVE)

EXACT_STATUSES = (*LIVE_STATUSES, *EXACT_FINISHED)
# The counts that are estimates (every other count is exact); `total` includes them.
ESTIMATED = ("completed", "total")
PERCENTILES = (50, 95, 99)
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

    Without the hint a `$group` with no `$match` would scan the collection.
    Falls back to no hint where the index is missing (indexes not created yet).
    """
    from pymongo.errors import OperationFailure

    try:
        return list(collection.aggregate(pipeline, hint=index))
    except OperationFailure as exc:
        if "hint" not in str(exc).lower() and exc.code not in (2, 17007):
            raise
        return list(collection.aggregate(pipeline))


def count_queries(settings: Settings) -> list[tuple[dict[str, Any], str]]:
    """(match, index) pairs giving every EXACT count, each from index keys only
    (queries.status_counts: the live states from their own partial indexes; failed,
    dead_letter and cancelled from the finished index with the status as its first
    key, so a count reads that status's keys and no completed activity's)."""
    return [(query.filter, index_name(settings, str(query.purpose))) for query in status_counts()]


def _grouped(ctx: QueueContext, fields: dict[str, str], *,
             by_type_index: bool = False) -> list[dict[str, Any]]:
    """Rows {status, <fields>..., count} of every exact count, grouped by `fields`."""
    queries = count_queries(ctx.settings)
    if by_type_index:  # pending by type: the index that leads with the type
        queries[0] = (queries[0][0], index_name(ctx.settings, "claims limited"))
    rows = []
    for match, index in queries:
        pipeline = [{"$match": match},
                    {"$group": {"_id": {"status": "$status", **fields}, "count": {"$sum": 1}}}]
        for row in _hinted(ctx.activities, pipeline, index):
            key = row["_id"] if isinstance(row.get("_id"), dict) else {}
            rows.append({**{name: key.get(name) for name in fields},
                         "status": str(key.get("status")), "count": int(row["count"])})
    return rows


def estimated_total(ctx: QueueContext) -> int:
    """Every document of the activities collection, from its metadata (O(1), not exact:
    MongoDB keeps it per collection and may be off after an unclean shutdown)."""
    return int(ctx.activities.estimated_document_count())


def _with_estimate(ctx: QueueContext, exact: dict[str, int]) -> dict[str, int]:
    """All REPORTED_STATUSES: the exact ones, and completed = total - exact (>= 0)."""
    by_status = dict.fromkeys(REPORTED_STATUSES, 0)
    for status, n in exact.items():
        by_status[status] = by_status.get(status, 0) + n
    by_status["completed"] = max(0, estimated_total(ctx) - sum(exact.values()))
    return by_status


def counts(ctx: QueueContext) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """(by_status, by_priority). Exact but for `completed`, an estimate (ESTIMATED),
    which by_priority leaves out. Cost: O(live + failed + dead-lettered + cancelled)."""
    exact: dict[str, int] = {}
    by_priority: dict[str, dict[str, int]] = {}
    for row in _grouped(ctx, {"priority": "$priority"}):
        status = row["status"]
        exact[status] = exact.get(status, 0) + row["count"]
        per = by_priority.setdefault(Priority.label(row["priority"]), {})
        per[status] = per.get(status, 0) + row["count"]
    return _with_estimate(ctx, exact), by_priority


def counts_by_type(ctx: QueueContext) -> dict[str, dict[str, int]]:
    """Exact counts by type and status (completed left out: see `counts`)."""
    out: dict[str, dict[str, int]] = {}
    for row in _grouped(ctx, {"type": "$activity_type"}, by_type_index=True):
        per = out.setdefault(str(row["type"]), {})
        per[row["status"]] = per.get(row["status"], 0) + row["count"]
    return dict(sorted(out.items()))


def oldest_pending(ctx: QueueContext, now: datetime) -> dict[str, Any] | None:
    """One seek per priority on the claim-order index (the four ranges merged:
    queries.oldest_pending). A stray pending document whose `created_at` is not a
    date is outside the query's range (doctor's `documents` check names it)."""
    from runnerq_cli.backend.queries import oldest_pending as named

    query = named()
    doc = ctx.activities.find_one(query.filter, {"_id": 1, "created_at": 1, "activity_type": 1},
                                  sort=query.sort_list)
    if doc is None:
        return None
    age = max(0.0, (now - doc["created_at"]).total_seconds())
    return {"activity_id": str(doc["_id"]), "activity_type": doc.get("activity_type"),
            "created_at": to_jsonable(doc["created_at"]), "age_seconds": round(age, 3)}


def throughput(ctx: QueueContext, now: datetime, minutes: int) -> dict[str, Any]:
    pipeline = [
        finished_since(now - timedelta(minutes=minutes)).match_stage,
        {"$group": {"_id": {"status": "$status", "minute": {"$floor": {"$divide": [
            {"$subtract": [now, "$completed_at"]}, 60_000]}}}, "count": {"$sum": 1}}},
    ]
    minutes_rows = [{"minutes_ago": m, "completed": 0, "failed": 0, "dead_letter": 0}
                    for m in range(minutes)]
    totals = dict.fromkeys(TERMINAL_DONE, 0)
    for row in ctx.activities.aggregate(pipeline):
        status = row["_id"]["status"]
        minute = max(0, int(row["_id"]["minute"] or 0))  # a writer's clock ahead: now
        totals[status] = totals.get(status, 0) + row["count"]
        if 0 <= minute < minutes:
            minutes_rows[minute][status] += row["count"]
    return {
        "window_minutes": minutes,
        "completed": totals[Status.COMPLETED.value],
        "failed": totals[Status.FAILED.value],
        "dead_letter": totals[Status.DEAD_LETTER.value],
        "completed_per_minute": round(totals[Status.COMPLETED.value] / minutes, 3),
        "failed_per_minute": round((totals[Status.FAILED.value]
                                    + totals[Status.DEAD_LETTER.value]) / minutes, 3),
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
    return {f"p{p}": {"$arrayElemAt": ["$v", {"$toInt": {"$floor": {"$multiply": [
        {"$subtract": [{"$size": "$v"}, 1]}, p / 100]}}}]} for p in percentiles}


def _percentile_stage(field: str) -> list[dict[str, Any]]:
    return [
        {"$match": {field: {"$ne": None}}},
        {"$sort": {field: 1}},
        {"$group": {"_id": None, "v": {"$push": f"${field}"}}},
        {"$project": {"_id": 0, "n": {"$size": "$v"}, **_picks(PERCENTILES)}},
    ]


def latency(ctx: QueueContext, now: datetime, window: float, cap: int) -> dict[str, Any]:
    """Queue wait (due -> started) and run time (started -> finished), in seconds.

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

    def summary(name: str) -> dict[str, Any]:
        found = (facets.get(name) or [{}])[0] if facets.get(name) else {}
        out: dict[str, Any] = {"count": int(found.get("n", 0))}
        for p in PERCENTILES:
            ms = found.get(f"p{p}")
            out[f"p{p}"] = None if ms is None else round(max(0.0, ms / 1000.0), 3)
        return out

    wait, run = summary("wait"), summary("run")
    return {"window_seconds": window, "sample_cap": cap,
            "capped": max(wait["count"], run["count"]) >= cap,
            "queue_wait_seconds": wait, "run_seconds": run}


def history(ctx: QueueContext, now: datetime, seconds: float, cap: int,
            buckets: int = HISTORY_BUCKETS) -> dict[str, Any]:
    """Per activity type over the last `seconds`: outcomes per bucket (oldest first) and
    the run time's p50/p95 per bucket, from the activities finished in the window.

    Answers from the history kept: activities removed by retention are no longer
    counted. Counts from the finished index's keys (covered); latency from the
    newest `cap` finished in the window (`capped` says when older buckets lack it).
    """
    since = now - timedelta(seconds=seconds)
    width_ms = seconds * 1000.0 / buckets
    finished = finished_since(since)
    match = finished.match_stage
    bucket = {"$floor": {"$divide": [{"$subtract": ["$completed_at", since]}, width_ms]}}
    types: dict[str, dict[str, Any]] = {}

    def entry(name: Any) -> dict[str, Any]:
        return types.setdefault(str(name), {
            "completed": 0, "failed": 0, "dead_letter": 0, "per_bucket": [0] * buckets,
            "run_p50": [None] * buckets, "run_p95": [None] * buckets})

    def slot(value: Any) -> int:
        return min(buckets - 1, max(0, int(value or 0)))  # a writer's clock ahead: newest

    counted = [match, {"$group": {"_id": {"t": "$activity_type", "s": "$status", "b": bucket},
                                  "count": {"$sum": 1}}}]
    for row in _hinted(ctx.activities, counted, index_name(ctx.settings, "list finished")):
        key, n = row["_id"], int(row["count"])
        per = entry(key.get("t"))
        per[str(key.get("s"))] = per.get(str(key.get("s")), 0) + n
        per["per_bucket"][slot(key.get("b"))] += n
    sampled: list[dict[str, Any]] = [match, finished.sort_stage, {"$limit": cap},
               {"$project": {"t": "$activity_type", "b": bucket, "run": RUN_MS}},
               {"$match": {"run": {"$ne": None}}}, {"$sort": {"run": 1}},
               {"$group": {"_id": {"t": "$t", "b": "$b"}, "v": {"$push": "$run"}}},
               {"$project": {"n": {"$size": "$v"}, **_picks((50, 95))}}]
    sample_size = 0
    for row in ctx.activities.aggregate(sampled):
        key = row["_id"]
        per, i = entry(key.get("t")), slot(key.get("b"))
        sample_size += int(row.get("n", 0))
        for p in (50, 95):
            ms = row.get(f"p{p}")
            per[f"run_p{p}"][i] = None if ms is None else round(max(0.0, ms / 1000.0), 3)
    return {"since_seconds": seconds, "bucket_seconds": seconds / buckets, "buckets": buckets,
            "sample_cap": cap, "capped": sample_size >= cap,
            "by_type": dict(sorted(types.items()))}


def worker_summary(ctx: QueueContext, now: datetime, stale_after: float,
                   malformed: list[str] | None = None) -> dict[str, int]:
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


def snapshot(ctx: QueueContext, options: StatsOptions) -> dict[str, Any]:
    """One stats snapshot with the stable schema `SCHEMA` (docs/reference.md: "Stats JSON")."""
    now = ctx.clock()
    malformed: list[str] = []
    by_status, by_priority = counts(ctx)
    return {
        "schema": SCHEMA,
        "queue": ctx.settings.queue,
        "generated_at": to_jsonable(now),
        "total": sum(by_status.values()),
        "by_status": by_status,
        "estimated": list(ESTIMATED),
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


CHECK_NAMES = frozenset(
    {*REPORTED_STATUSES, "running", "dead-letter", "total", "oldest_pending",
     "completed_per_minute", "failed_per_minute", "workers", "stale_workers", "in_flight",
     "malformed", *(f"{prefix}_p{p}" for prefix in ("wait", "run") for p in PERCENTILES)})


def check_values(snap: dict[str, Any]) -> dict[str, float]:
    """The flat names a `--check` expression may use, in seconds or counts."""
    values: dict[str, float] = {name: float(n) for name, n in snap["by_status"].items()}
    values["running"] = values.get("processing", 0.0)
    values["dead-letter"] = values.get("dead_letter", 0.0)
    values["total"] = float(snap["total"])
    oldest = snap.get("oldest_pending")
    values["oldest_pending"] = float(oldest["age_seconds"]) if oldest else 0.0
    tp = snap["throughput"]
    values["completed_per_minute"] = float(tp["completed_per_minute"])
    values["failed_per_minute"] = float(tp["failed_per_minute"])
    for prefix, key in (("wait", "queue_wait_seconds"), ("run", "run_seconds")):
        for p in PERCENTILES:
            value = snap["latency"][key][f"p{p}"]
            values[f"{prefix}_p{p}"] = float(value) if value is not None else 0.0
    values["workers"] = float(snap["workers"]["live"])
    values["stale_workers"] = float(snap["workers"]["stale"])
    values["in_flight"] = float(snap["workers"]["in_flight"])
    values["malformed"] = float(len(snap.get("malformed") or []))
    return values


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


def counts_by_status_priority_type(ctx: QueueContext) -> list[dict[str, Any]]:
    """[{status, priority, type, count}] of the exact statuses (EXACT_STATUSES)."""
    rows = [{"status": row["status"], "priority": Priority.label(row["priority"]),
             "type": str(row["type"]), "count": row["count"]}
            for row in _grouped(ctx, {"priority": "$priority", "type": "$activity_type"},
                                by_type_index=True)]
    return sorted(rows, key=lambda r: (r["status"], r["type"], r["priority"]))


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


def metrics_sample(ctx: QueueContext, paused: bool, options: MetricsOptions) -> dict[str, Any]:
    """The numbers one scrape exposes for one queue (plain data, no exposition format)."""
    now = ctx.clock()
    malformed: list[str] = []
    rows = counts_by_status_priority_type(ctx)
    exact = sum(row["count"] for row in rows)
    oldest = oldest_pending(ctx, now)
    return {
        "queue": ctx.settings.queue,
        "activities": rows,
        "estimated": {"completed": max(0, estimated_total(ctx) - exact)},
        "oldest_pending_age_seconds": oldest["age_seconds"] if oldest else 0.0,
        "window_seconds": options.window_seconds,
        "finished": finished_in_window(ctx, now, options.window_seconds),
        "latency": latency(ctx, now, options.window_seconds, options.sample_cap),
        "workers": worker_summary(ctx, now, options.stale_after, malformed),
        "paused": paused,
        "malformed": len(malformed),
    }

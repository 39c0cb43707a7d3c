"""The `stats` snapshot: counts, oldest pending, throughput, latency percentiles, workers.

Everything is computed on the server; the client receives a few numbers per
query, never activities. Each query is bounded by an index (see the cost table
in docs/cli.md, "What each stats query costs", which mirrors `QUERY_COSTS` below):

- counts by status and priority: one `$group` per state on its partial index
  (hinted, covered: index keys only, no document reads);
- counts by type: the same (the partial indexes hold the type too);
- oldest pending: one indexed seek (`priority $in [1..4]` merges the four
  claim-order index ranges, sorted by `created_at`, limit 1);
- throughput: terminal activities with `completed_at` in the last N minutes,
  on the `(status, completed_at)` index, grouped per minute;
- percentiles: the same index, the newest `sample_cap` terminal activities in
  the window, sorted and picked on the server (nearest rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli.backend.context import QueueContext
from runnerq_cli.backend.indexes import index_name
from runnerq_cli.backend.models import Priority, Status, to_jsonable
from runnerq_cli.backend.timing import TIMING
from runnerq_cli.config import Settings

SCHEMA = "runnerq.stats/1"
TERMINAL_DONE = [Status.COMPLETED.value, Status.FAILED.value, Status.DEAD_LETTER.value]
REPORTED_STATUSES = ("pending", "scheduled", "processing", "completed", "failed", "dead_letter",
                     "cancelled")
PERCENTILES = (50, 95, 99)

QUERY_COSTS = {
    "by_status / by_priority": "one $group per state over its partial index, covered (reads "
                               "every index key once, no documents): O(activities) key reads",
    "by_type (--by type)": "the same per state, also covered: O(activities) key reads",
    "oldest_pending": "one index seek on the claim-order index (4 ranges merged): O(1)",
    "throughput": "range on the finished index (status, completed_at) for the last N minutes: "
                  "O(finished in window)",
    "latency percentiles": "the same range, newest `sample_cap` (default 10000) fetched and "
                           "sorted on the server: O(min(finished in window, cap))",
    "workers": "the worker registry (one document per worker process)",
}


@dataclass(frozen=True)
class StatsOptions:
    by_type: bool = False
    throughput_minutes: int = 5
    latency_window_seconds: float = 900.0
    sample_cap: int = 10_000
    stale_after: float = TIMING.worker_stale_after



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
    """(match, index) pairs that together count every activity, each from index keys."""
    from runnerq_cli.backend.queries import status_counts

    return [(query.filter, index_name(settings, str(query.purpose))) for query in status_counts()]


def counts(ctx: QueueContext) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Counts by status and priority: one covered $group per state's partial index."""
    by_status = dict.fromkeys(REPORTED_STATUSES, 0)
    by_priority: dict[str, dict[str, int]] = {}
    for match, index in count_queries(ctx.settings):
        pipeline = [{"$match": match},
                    {"$group": {"_id": {"status": "$status", "priority": "$priority"},
                                "count": {"$sum": 1}}}]
        for row in _hinted(ctx.activities, pipeline, index):
            status = str(row["_id"].get("status"))
            by_status[status] = by_status.get(status, 0) + row["count"]
            per = by_priority.setdefault(Priority.label(row["_id"].get("priority")), {})
            per[status] = per.get(status, 0) + row["count"]
    return by_status, by_priority


def counts_by_type(ctx: QueueContext) -> dict[str, dict[str, int]]:
    """Counts by type and status: one covered $group per state's partial index."""
    out: dict[str, dict[str, int]] = {}
    queries = count_queries(ctx.settings)
    queries[0] = (queries[0][0], index_name(ctx.settings, "claims limited"))
    for match, index in queries:
        pipeline = [{"$match": match},
                    {"$group": {"_id": {"status": "$status", "type": "$activity_type"},
                                "count": {"$sum": 1}}}]
        for row in _hinted(ctx.activities, pipeline, index):
            per = out.setdefault(str(row["_id"].get("type")), {})
            status = str(row["_id"].get("status"))
            per[status] = per.get(status, 0) + row["count"]
    return dict(sorted(out.items()))


def oldest_pending(ctx: QueueContext, now: datetime) -> dict[str, Any] | None:
    """One seek per priority on the claim-order index (the four ranges merged)."""
    from runnerq_cli.backend.queries import oldest_pending as query

    doc = ctx.activities.find_one(query().filter, {"_id": 1, "created_at": 1, "activity_type": 1},
                                  sort=query().sort_list)
    if doc is None:
        return None
    age = max(0.0, (now - doc["created_at"]).total_seconds())
    return {"activity_id": str(doc["_id"]), "activity_type": doc.get("activity_type"),
            "created_at": to_jsonable(doc["created_at"]), "age_seconds": round(age, 3)}


def throughput(ctx: QueueContext, now: datetime, minutes: int) -> dict[str, Any]:
    since = now - timedelta(minutes=minutes)
    pipeline = [
        {"$match": {"status": {"$in": TERMINAL_DONE}, "completed_at": {"$gte": since}}},
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


def _percentile_stage(field: str) -> list[dict[str, Any]]:
    picks = {f"p{p}": {"$arrayElemAt": ["$v", {"$toInt": {"$floor": {"$multiply": [
        {"$subtract": [{"$size": "$v"}, 1]}, p / 100]}}}]} for p in PERCENTILES}
    return [
        {"$match": {field: {"$ne": None}}},
        {"$sort": {field: 1}},
        {"$group": {"_id": None, "v": {"$push": f"${field}"}}},
        {"$project": {"_id": 0, "n": {"$size": "$v"}, **picks}},
    ]


def latency(ctx: QueueContext, now: datetime, window: float, cap: int) -> dict[str, Any]:
    """Queue wait (due -> started) and run time (started -> finished), in seconds.

    Over terminal activities finished in the last `window` seconds, at most
    the newest `cap` of them; nearest-rank percentiles picked on the server.
    """
    since = now - timedelta(seconds=window)
    pipeline = [
        {"$match": {"status": {"$in": TERMINAL_DONE}, "completed_at": {"$gte": since}}},
        {"$sort": {"completed_at": -1}},
        {"$limit": cap},
        {"$project": {
            "wait": {"$subtract": ["$started_at", {"$ifNull": ["$scheduled_at", "$created_at"]}]},
            "run": {"$subtract": ["$completed_at", "$started_at"]},
        }},
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


def snapshot(ctx: QueueContext, workers: list[Any], options: StatsOptions) -> dict[str, Any]:
    """One stats snapshot with the stable schema `SCHEMA` (docs/reference.md: "Stats JSON")."""
    now = ctx.clock()
    by_status, by_priority = counts(ctx)
    live = [w for w in workers if not w.stale]
    return {
        "schema": SCHEMA,
        "queue": ctx.settings.queue,
        "generated_at": to_jsonable(now),
        "total": sum(by_status.values()),
        "by_status": by_status,
        "by_priority": {name: by_priority[name] for name in sorted(by_priority, key=_rank)},
        "by_type": counts_by_type(ctx) if options.by_type else None,
        "oldest_pending": oldest_pending(ctx, now),
        "throughput": throughput(ctx, now, options.throughput_minutes),
        "latency": latency(ctx, now, options.latency_window_seconds, options.sample_cap),
        "workers": {"live": len(live), "stale": len(workers) - len(live),
                    "in_flight": sum(w.in_flight for w in live)},
    }


CHECK_NAMES = frozenset(
    {*REPORTED_STATUSES, "running", "dead-letter", "total", "oldest_pending",
     "completed_per_minute", "failed_per_minute", "workers", "stale_workers", "in_flight",
     *(f"{prefix}_p{p}" for prefix in ("wait", "run") for p in PERCENTILES)})


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
    return values


# ----------------------------------------------------------- Prometheus metrics
# One bounded set of queries per scrape and queue (exposition.py renders it):
# covered $groups on the partial indexes, one oldest-pending seek, one range on
# (status, completed_at) for the window's outcomes, the latency sample, and the
# worker registry.


@dataclass(frozen=True)
class MetricsOptions:
    window_seconds: float = 300.0  # outcomes and latency percentiles over this window
    sample_cap: int = 10_000
    stale_after: float = TIMING.worker_stale_after


def counts_by_status_priority_type(ctx: QueueContext) -> list[dict[str, Any]]:
    """[{status, priority, type, count}]: one covered $group per state's partial index."""
    rows = []
    queries = count_queries(ctx.settings)
    queries[0] = (queries[0][0], index_name(ctx.settings, "claims limited"))
    for match, index in queries:
        pipeline = [{"$match": match},
                    {"$group": {"_id": {"status": "$status", "priority": "$priority",
                                        "type": "$activity_type"}, "count": {"$sum": 1}}}]
        rows += [{"status": str(row["_id"].get("status")),
                  "priority": Priority.label(row["_id"].get("priority")),
                  "type": str(row["_id"].get("type")), "count": int(row["count"])}
                 for row in _hinted(ctx.activities, pipeline, index)]
    return sorted(rows, key=lambda r: (r["status"], r["type"], r["priority"]))


def finished_in_window(ctx: QueueContext, now: datetime, seconds: float) -> dict[str, int]:
    """Activities that reached completed/failed/dead_letter in the last `seconds`."""
    pipeline = [
        {"$match": {"status": {"$in": TERMINAL_DONE},
                    "completed_at": {"$gte": now - timedelta(seconds=seconds)}}},
        {"$group": {"_id": "$status", "count": {"$sum": 1}}},
    ]
    out = dict.fromkeys(TERMINAL_DONE, 0)
    for row in ctx.activities.aggregate(pipeline):
        out[str(row["_id"])] = int(row["count"])
    return out


def metrics_sample(ctx: QueueContext, workers: list[Any], paused: bool,
                   options: MetricsOptions) -> dict[str, Any]:
    """The numbers one scrape exposes for one queue (plain data, no exposition format)."""
    now = ctx.clock()
    oldest = oldest_pending(ctx, now)
    live = [w for w in workers if not w.stale]
    return {
        "queue": ctx.settings.queue,
        "activities": counts_by_status_priority_type(ctx),
        "oldest_pending_age_seconds": oldest["age_seconds"] if oldest else 0.0,
        "window_seconds": options.window_seconds,
        "finished": finished_in_window(ctx, now, options.window_seconds),
        "latency": latency(ctx, now, options.window_seconds, options.sample_cap),
        "workers": {"live": len(live), "stale": len(workers) - len(live),
                    "in_flight": sum(w.in_flight for w in live)},
        "paused": paused,
    }

"""Diagnosis for operators: `doctor` checks, `explain ID`, queue discovery and summaries.

Everything here returns data (checks, explanations, summaries); the CLI
prints it. Every query is bounded: indexed counts with a limit, single index
seeks, `distinct` over an index, the worker registry (one document per worker
process). Nothing scans a queue's activities.

Two things other parts of the code own are read from ONE place here, so that
they change in one place:
- the queries to check with `explain`: `representative_queries()` (written
  against queue.py, inspection.py, pagination.py, events.py and metrics.py);
- whether a queue is paused: `queue_pause()`.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runnerq_cli.backend.models import (
    Priority,
    Status,
    display_status,
    parse_activity_id,
    to_jsonable,
)
from runnerq_cli.backend.naming import validate_queue_name
from runnerq_cli.backend.rules import attempts_remain
from runnerq_cli.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.workers import WorkerInfo
    from runnerq_cli.config import Settings

STALE_AFTER = 30.0  # seconds without a heartbeat: a worker is stale (workers.py's default)
LEASE_GRACE = 30.0  # an expired lease older than this means no reaper ran (it runs <= 15 s)
OUTBOX_MAX_AGE = 60.0  # outboxes older than this were left by a crash (repair grace)
PENDING_AGE_WARN = 300.0  # the oldest pending activity waiting longer than this: warn
CLOCK_SKEW_WARN = 1.0  # seconds
COUNT_LIMIT = 100_000  # counts stop here ("at least N"): bounded on a queue of millions
TYPES_LIMIT = 1000  # distinct pending types looked at
_QUEUE_COLLECTION = re.compile(r"runnerq_(.+)_activities")


class CheckStatus(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    NOT_CHECKED = "not_checked"


@dataclass(frozen=True)
class Check:
    """One doctor check: what was looked at, what was found, how to fix it."""

    name: str
    status: CheckStatus
    message: str
    fix: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None  # None: a check of the server, not of one queue

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "queue": self.queue, "status": self.status.value,
                "message": self.message, "fix": self.fix, "facts": to_jsonable(self.facts)}


def _now(rq: RunnerQ) -> datetime:
    return rq.collections.clock()


def _count(collection: Any, query: dict[str, Any]) -> int:
    return int(collection.count_documents(query, limit=COUNT_LIMIT))


def _at_least(n: int) -> str:
    return f"at least {n}" if n >= COUNT_LIMIT else str(n)


def _activities(n: int) -> str:
    return f"{_at_least(n)} {'activity' if n == 1 else 'activities'}"


# ------------------------------------------------------------------ pausing


def queue_pause(rq: RunnerQ, activity_type: str | None = None) -> dict[str, Any] | None:
    """The pause that stops claims (of `activity_type`, when given), or None."""
    state = rq.paused()
    if not state.active:
        return None
    if activity_type is not None and not state.all and activity_type not in state.types:
        return None
    return state.to_json()


# ------------------------------------------------------------ queue discovery


def discover_queues(db: Any) -> list[str]:
    """Every RunnerQ queue in the database, from its `runnerq_{queue}_activities` collection."""
    found = []
    for name in db.list_collection_names():
        match = _QUEUE_COLLECTION.fullmatch(name)
        if not match:
            continue
        try:
            found.append(validate_queue_name(match.group(1)))
        except InvalidArgument:
            continue  # someone else's collection that merely looks like ours
    return sorted(set(found))


def require_queues(db: Any, database: str, wanted: list[str]) -> list[str]:
    """`wanted`, each checked to exist; NotFound names the queues that do."""
    known = discover_queues(db)
    for name in wanted:
        validate_queue_name(name)
        if name not in known:
            listed = ", ".join(known[:20]) or "none"
            raise NotFound(f"queue {name!r} not found in database {database!r} "
                           f"(queues there: {listed})")
    return wanted


def queue_summary(rq: RunnerQ, stale_after: float = STALE_AFTER) -> dict[str, Any]:
    """One queue at a glance: counts by status, oldest pending, workers, paused."""
    from runnerq_cli.backend.metrics import ESTIMATED, counts, oldest_pending

    now = _now(rq)
    by_status, _ = counts(rq.collections)
    workers = rq.list_workers(stale_after)
    live = [w for w in workers if not w.stale]
    oldest = oldest_pending(rq.collections, now)
    return {
        "queue": rq.queue,
        "total": sum(by_status.values()),
        "by_status": by_status,
        "estimated": list(ESTIMATED),  # completed and total: metrics.counts
        "oldest_pending_age_seconds": oldest["age_seconds"] if oldest else None,
        "workers": {"live": len(live), "stale": len(workers) - len(live),
                    "in_flight": sum(w.in_flight for w in live)},
        "paused": queue_pause(rq) is not None,
    }


# ------------------------------------------------------- representative queries


@dataclass(frozen=True)
class RepresentativeQuery:
    """A query the code runs, to check with `explain` that an index serves it."""

    name: str
    role: str  # collection role: activities, events, dead_letter, workers, ...
    filter: dict[str, Any]
    sort: tuple[tuple[str, int], ...] = ()
    pipeline: tuple[dict[str, Any], ...] | None = None  # an aggregation instead of a find
    hint: str | None = None  # the code runs it with this hint
    index: str | None = None  # the index meant to serve it (tests hint it on any server)
    # An in-memory sort is harmless where the matching set is bounded by something
    # other than the queue's size (running activities: by the workers' concurrency).
    sort_in_memory_ok: bool = False


def representative_queries(settings: Settings, now: datetime) -> list[RepresentativeQuery]:
    """The claim, scheduler, reaper, retention, list, stats and tail queries, as the code runs
    them, each with the index meant to serve it.

    The ONE list the doctor's "served by an index" check uses; keep it in step
    with backend/queue.py (dequeue, process_scheduled, requeue_expired,
    retention_queries), writes.py (repair), inspection.py and pagination.py
    (lists), events.py (tails) and metrics.py (stats).
    """
    from runnerq_cli.backend.indexes import EVER, index_name
    from runnerq_cli.backend.metrics import TERMINAL_DONE, count_queries
    from runnerq_cli.backend.pagination import ORDERS, status_query

    def ix(purpose: str) -> str:
        return index_name(settings, purpose)

    pending, claim_order = Status.PENDING.value, (("priority", -1), ("created_at", 1))
    recent = now - timedelta(seconds=10)
    queries = [
        RepresentativeQuery("claim", "activities", {"status": pending}, claim_order,
                            index=ix("claim order")),
        RepresentativeQuery("claim by type", "activities",
                            {"status": pending, "activity_type": {"$in": ["a", "b"]}},
                            claim_order, index=ix("claims limited")),
        RepresentativeQuery("claim around paused types", "activities",
                            {"status": pending, "activity_type": {"$nin": ["a"]}},
                            claim_order, index=ix("claim order")),
        RepresentativeQuery("scheduler", "activities",
                            {"status": Status.SCHEDULED.value, "scheduled_at": {"$lte": now}},
                            index=ix("due scheduled")),
        RepresentativeQuery("reaper", "activities",
                            {"status": Status.PROCESSING.value, "lease_deadline": {"$lt": now}},
                            index=ix("expired leases")),
        RepresentativeQuery("outbox repair", "activities",
                            {"outbox.since": {"$lt": now - timedelta(seconds=60)}},
                            index=ix("repair of outboxes")),
    ]
    for name, statuses, keep in (
        ("completed", [Status.COMPLETED.value], settings.retention_completed),
        ("failed", [Status.FAILED.value, Status.DEAD_LETTER.value, Status.CANCELLED.value],
         settings.retention_failed),
    ):
        if keep > 0:
            queries.append(RepresentativeQuery(
                f"retention {name}", "activities",
                {"status": {"$in": statuses},
                 "completed_at": {"$lt": now - timedelta(seconds=keep)}},
                index=ix("list finished")))
    by_status = {Status.PENDING: "claim order", Status.SCHEDULED: "due scheduled",
                 Status.PROCESSING: "expired leases"}
    for status, (order, _since_field) in ORDERS.items():
        queries.append(RepresentativeQuery(
            f"list {display_status(status.value)}", "activities", status_query(status), order,
            index=ix(by_status.get(status, "list finished"))))
    for match, index in count_queries(settings):
        queries.append(RepresentativeQuery(
            f"stats counts ({index.rsplit('_', 1)[-1]})", "activities", match, pipeline=(
                {"$match": match},
                {"$group": {"_id": {"status": "$status", "priority": "$priority"},
                            "count": {"$sum": 1}}}), hint=index, index=index))
    queries += [
        RepresentativeQuery("stats oldest pending", "activities",
                            {"status": pending, "priority": {"$in": [int(p) for p in Priority]}},
                            (("created_at", 1),), index=ix("claim order")),
        RepresentativeQuery("stats window", "activities",
                            {"status": {"$in": TERMINAL_DONE},
                             "completed_at": {"$gte": now - timedelta(minutes=15)}},
                            (("completed_at", -1),), index=ix("list finished")),
        RepresentativeQuery("tail: enqueued", "activities", {"created_at": {"$gte": recent}},
                            (("created_at", 1),), index=ix("derived Enqueued")),
        RepresentativeQuery("tail: started", "activities", {"started_at": {"$gte": recent}},
                            (("started_at", 1),), index=ix("derived Dequeued")),
        RepresentativeQuery("tail: completed", "activities",
                            {"status": Status.COMPLETED.value, "completed_at": {"$gte": recent}},
                            (("completed_at", 1),), index=ix("list finished")),
        RepresentativeQuery("tail: steps not copied out yet", "activities",
                            {"outbox.since": {"$exists": True}},
                            index=ix("repair of outboxes")),
        RepresentativeQuery("terminal (any)", "activities",
                            {"status": Status.FAILED.value, "completed_at": {"$gte": EVER}},
                            (("completed_at", -1), ("_id", -1)), index=ix("list finished")),
        RepresentativeQuery("events of an activity", "events",
                            {"activity_id": uuid.UUID(int=0)}, (("timestamp", -1),),
                            index=ix("events of an activity")),
        RepresentativeQuery("event stream polling", "events",
                            {"ingested_at": {"$gte": now}}, (("ingested_at", 1), ("_id", 1)),
                            index=ix("event stream polling")),
        RepresentativeQuery("dead-letter list", "dead_letter", {}, (("failed_at", -1),),
                            index=ix("dead-letter listing")),
        RepresentativeQuery("live workers", "workers",
                            {"last_heartbeat": {"$gte": now - timedelta(seconds=STALE_AFTER)}},
                            index=ix("stale worker")),
    ]
    return queries


def plan_stages(explained: dict[str, Any]) -> list[str] | None:
    """Stage names of every winning plan in a MongoDB `explain` answer, or None.

    None: the answer is not MongoDB's format (no `queryPlanner.winningPlan`),
    as on the dev server: nothing can be concluded from it.
    """
    plans: list[dict[str, Any]] = []

    def find_plans(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "winningPlan" and isinstance(value, dict):
                    plans.append(value)
                elif key != "rejectedPlans":
                    find_plans(value)
        elif isinstance(node, list):
            for item in node:
                find_plans(item)

    def stages(node: Any, out: list[str]) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("stage"), str):
                out.append(node["stage"])
            for key, value in node.items():
                if key in ("inputStage", "inputStages", "queryPlan", "shards", "innerStage",
                           "outerStage", "thenStage", "elseStage") or key == "winningPlan":
                    stages(value, out)
        elif isinstance(node, list):
            for item in node:
                stages(item, out)

    find_plans(explained)
    if not plans:
        return None
    out: list[str] = []
    for plan in plans:
        stages(plan, out)
    return out


def plan_problems(stage_names: list[str]) -> list[str]:
    """What makes a plan unbounded: a collection scan, an in-memory sort."""
    problems = []
    if "COLLSCAN" in stage_names:
        problems.append("collection scan")
    if "SORT" in stage_names:
        problems.append("in-memory sort")
    return problems


def _explain(rq: RunnerQ, query: RepresentativeQuery) -> dict[str, Any]:
    collection = rq.collections.names.all()[query.role]
    if query.pipeline is not None:
        command: dict[str, Any] = {"aggregate": collection, "pipeline": list(query.pipeline),
                                   "cursor": {}}
        if query.hint:
            command["hint"] = query.hint
    else:
        command = {"find": collection, "filter": query.filter, "limit": 1}
        if query.sort:
            command["sort"] = dict(query.sort)
    return rq.db.command("explain", command, verbosity="queryPlanner",
                         codec_options=rq.db.codec_options)


# ------------------------------------------------------------------- checks


def _server_facts(rq: RunnerQ) -> dict[str, Any]:
    admin = rq.db.client.admin
    started = time.time()
    hello = admin.command("hello")
    finished = time.time()
    facts: dict[str, Any] = {"hello": hello, "rtt": finished - started,
                             "midpoint": (started + finished) / 2}
    try:
        facts["build"] = admin.command("buildInfo")
    except Exception:  # some hosted servers refuse it to ordinary users
        facts["build"] = {}
    return facts


def _topology(hello: dict[str, Any]) -> str:
    if hello.get("msg") == "isdbgrid":
        return "sharded"
    if hello.get("setName"):
        return "replica set"
    return "standalone"


def check_server(rq: RunnerQ, info: dict[str, Any]) -> Check:
    """Reachable, its version, and what its topology means for runnerq-mongo."""
    hello, build = info["hello"], info["build"]
    version = build.get("version") or hello.get("version") or "unknown"
    dev = "mongoeco" in str(build.get("gitVersion") or hello.get("gitVersion") or "")
    topology = _topology(hello)
    facts: dict[str, Any] = {"version": version, "topology": topology, "dev_server": dev,
                             "round_trip_ms": round(info["rtt"] * 1000, 1)}
    notes: list[str] = []
    status, fix = CheckStatus.OK, None
    if topology == "standalone":
        facts["tail"] = "polling (change streams need a replica set)"
        facts["default_write_concern"] = "w:1 (no replication)"
    else:
        facts["tail"] = "change streams"
        try:
            rw = rq.db.client.admin.command("getDefaultRWConcern")
            wc = (rw.get("defaultWriteConcern") or {}).get("w", "majority")
            facts["default_write_concern"] = f"w:{wc} ({rw.get('defaultWriteConcernSource')})"
        except Exception:
            wc = None
            facts["default_write_concern"] = "unknown (getDefaultRWConcern refused)"
        uri_w = rq.db.client.write_concern.document.get("w")
        effective = uri_w if uri_w is not None else wc
        facts["effective_write_concern"] = f"w:{effective}" if effective is not None else None
        if effective not in (None, "majority"):
            status = CheckStatus.WARN
            notes.append(f"writes use w:{effective}: a failover can roll back acknowledged "
                         "claims and acknowledgements")
            fix = "use w=majority in the URI (or as the cluster's default write concern)"
    read_pref = rq.db.client.read_preference.name
    facts["read_preference"] = read_pref
    if read_pref != "Primary" and read_pref.lower() != "primary":
        status = CheckStatus.WARN
        notes.append(f"the URI asks for read preference {read_pref}: the reaper's and the "
                     "lists' reads may be stale (claims and acknowledgements go to the primary)")
        fix = "remove readPreference from the workers' URI (they must read the primary)"
    label = "the mongoeco dev server" if dev else f"MongoDB {version}"
    message = (f"{label}, {topology}; tail uses {facts['tail'].split(' (')[0]}; "
               f"default write concern {facts['default_write_concern']}")
    if notes:
        message += "; " + "; ".join(notes)
    return Check("server", status, message, fix, facts)


def check_clock(rq: RunnerQ, info: dict[str, Any]) -> Check:
    """This host's clock against the server's (`hello.localTime`, corrected by half the RTT)."""
    server_time = info["hello"].get("localTime")
    if not isinstance(server_time, datetime):
        return Check("clock", CheckStatus.NOT_CHECKED, "the server does not report its clock")
    if server_time.tzinfo is None:
        server_time = server_time.replace(tzinfo=UTC)
    skew = server_time.timestamp() - info["midpoint"]
    # Lease deadlines are written by one host's clock and compared by another's (the
    # reaper's): a skew of a quarter lease reaps live work early or dead work late.
    fail_at = max(CLOCK_SKEW_WARN * 2, rq.settings.lease / 4)
    facts = {"skew_seconds": round(skew, 3), "uncertainty_seconds": round(info["rtt"] / 2, 3),
             "warn_at_seconds": CLOCK_SKEW_WARN, "fail_at_seconds": fail_at,
             "lease_seconds": rq.settings.lease}
    ahead = "ahead of" if skew < 0 else "behind"
    text = f"this host is {abs(skew):.3f}s {ahead} the server"
    if abs(skew) >= fail_at:
        return Check("clock", CheckStatus.FAIL, f"{text} (a quarter lease is {fail_at:g}s): "
                     "leases expire early or late", "synchronise clocks (NTP) on every host",
                     facts)
    if abs(skew) >= CLOCK_SKEW_WARN:
        return Check("clock", CheckStatus.WARN, text, "synchronise clocks (NTP)", facts)
    return Check("clock", CheckStatus.OK, f"{text} (within {CLOCK_SKEW_WARN:g}s)", None, facts)


def _init_command(rq: RunnerQ) -> str:
    return f"runnerq-mongo --queue {rq.queue} init-indexes"


def check_indexes(rq: RunnerQ, reports: list[Any]) -> Check:
    """Every planned index, as `init-indexes --check` sees it (TTL ones: check_ttl)."""
    plain = [r for r in reports if "expireAfterSeconds" not in r.spec.options]
    missing = [r for r in plain if r.state.value == "missing"]
    conflict = [r for r in plain if r.state.value == "conflict"]
    facts = {"planned": len(plain), "missing": [f"{r.collection_name} {r.spec.name}"
                                                for r in missing],
             "conflicting": [f"{r.collection_name} {r.spec.name}: {r.difference}"
                             for r in conflict]}
    if conflict:
        first = conflict[0]
        return Check("indexes", CheckStatus.FAIL,
                     f"{len(conflict)} index(es) differ from the plan, e.g. "
                     f"{first.collection_name} {first.spec.name}: {first.difference}",
                     f"drop the differing index, then run `{_init_command(rq)}`", facts)
    if missing:
        return Check("indexes", CheckStatus.FAIL,
                     f"{len(missing)} of {len(plain)} indexes missing, e.g. "
                     f"{missing[0].collection_name} {missing[0].spec.name}",
                     f"run `{_init_command(rq)}`", facts)
    return Check("indexes", CheckStatus.OK, f"all {len(plain)} indexes present", None, facts)


def check_ttl(rq: RunnerQ, reports: list[Any]) -> Check:
    """TTL indexes present with the configured expiry; on a real server, the TTL monitor on."""
    ttl = [r for r in reports if "expireAfterSeconds" in r.spec.options]
    bad = [r for r in ttl if r.state.value != "present"]
    facts: dict[str, Any] = {r.collection_name: {"expireAfterSeconds":
                                                  r.spec.options["expireAfterSeconds"],
                                                  "state": r.state.value,
                                                  "difference": r.difference or None}
                             for r in ttl}
    try:
        param = rq.db.client.admin.command("getParameter", 1, ttlMonitorEnabled=1)
        monitor = bool(param.get("ttlMonitorEnabled", True))
        facts["ttl_monitor"] = "enabled" if monitor else "disabled"
    except Exception:
        monitor = None
        facts["ttl_monitor"] = "not checked (getParameter refused)"
    if bad:
        first = bad[0]
        what = first.difference or "missing"
        fix = (f"run `{_init_command(rq)}`" if first.state.value == "missing" else
               f"drop the TTL index {first.spec.name} on {first.collection_name} (or change "
               f"the setting to match it), then run `{_init_command(rq)}`")
        return Check("ttl", CheckStatus.FAIL,
                     f"TTL index on {first.collection_name} {first.state.value}: {what}",
                     fix, facts)
    if monitor is False:
        return Check("ttl", CheckStatus.FAIL, "the server's TTL monitor is disabled: results, "
                     "idempotency keys and events never expire",
                     "setParameter ttlMonitorEnabled=true", facts)
    suffix = "" if monitor else " (TTL monitor not checked)"
    return Check("ttl", CheckStatus.OK, f"{len(ttl)} TTL indexes present{suffix}", None, facts)


def check_query_plans(rq: RunnerQ, now: datetime) -> Check:
    """Each representative query served by an index (no COLLSCAN, no in-memory SORT)."""
    from pymongo.errors import OperationFailure

    served, problems, unknown = [], [], []
    for query in representative_queries(rq.settings, now):
        try:
            stage_names = plan_stages(_explain(rq, query))
        except OperationFailure as exc:
            problems.append(f"{query.name}: explain failed ({str(exc)[:120]})")
            continue
        if stage_names is None:  # not MongoDB's explain: no other answer will be either
            unknown = [q.name for q in representative_queries(rq.settings, now)
                       if q.name not in served]
            break
        found = [p for p in plan_problems(stage_names)
                 if not (query.sort_in_memory_ok and p == "in-memory sort")]
        if found:
            problems.append(f"{query.name}: {' and '.join(found)}")
        else:
            served.append(query.name)
    facts = {"served": served, "problems": problems, "not_checked": unknown}
    if problems:
        return Check("query plans", CheckStatus.FAIL,
                     f"{len(problems)} queries not served by an index: " + "; ".join(problems),
                     f"run `{_init_command(rq)}` (a missing index); otherwise report it", facts)
    if unknown and not served:
        return Check("query plans", CheckStatus.NOT_CHECKED,
                     "the server's explain is not MongoDB's (dev server): not checked", None,
                     facts)
    return Check("query plans", CheckStatus.OK,
                 f"all {len(served)} queries served by an index", None, facts)


def _handles(worker: WorkerInfo, activity_type: str) -> bool:
    return not worker.types or activity_type in worker.types


def check_workers(rq: RunnerQ, workers: list[WorkerInfo], pending: int) -> Check:
    live = [w for w in workers if not w.stale]
    stale = [w for w in workers if w.stale]
    facts = {"live": len(live), "stale": len(stale), "in_flight": sum(w.in_flight for w in live),
             "stale_workers": [{"id": w.worker_id, "host": w.host, "pid": w.pid,
                                "last_heartbeat": w.last_heartbeat} for w in stale[:20]]}
    if stale:
        first = stale[0]
        return Check("workers", CheckStatus.FAIL,
                     f"{len(stale)} stale worker{'s' if len(stale) > 1 else ''} "
                     f"(no heartbeat for {STALE_AFTER:g}s), e.g. "
                     f"{first.worker_id} on {first.host} pid {first.pid}; {len(live)} live",
                     "check those processes; a dead worker's entry expires after 10 minutes "
                     "and its activities return when their leases expire", facts)
    if not live:
        status = CheckStatus.WARN if pending else CheckStatus.OK
        return Check("workers", status, "no live workers", "start a worker: runnerq-mongo worker"
                     if pending else None, facts)
    return Check("workers", CheckStatus.OK,
                 f"{len(live)} live, {facts['in_flight']} activities in flight", None, facts)


def check_coverage(rq: RunnerQ, workers: list[WorkerInfo]) -> Check:
    """Activity types with due (pending) work and no live worker that handles them."""
    live = [w for w in workers if not w.stale]
    types = [t for t in rq.collections.activities.distinct(
        "activity_type", {"status": Status.PENDING.value})[:TYPES_LIMIT] if isinstance(t, str)]
    orphans = sorted(t for t in types if not any(_handles(w, t) for w in live))
    facts: dict[str, Any] = {"pending_types": len(types), "without_worker": {
        t: _count(rq.collections.activities, {"status": Status.PENDING.value,
                                              "activity_type": t}) for t in orphans[:20]}}
    if orphans:
        shown = ", ".join(f"{t} ({_at_least(n)} pending)"
                          for t, n in facts["without_worker"].items())
        return Check("coverage", CheckStatus.FAIL,
                     f"no live worker handles {shown}",
                     "start a worker for these types (runnerq-mongo worker --types ...)", facts)
    return Check("coverage", CheckStatus.OK,
                 f"every pending type ({len(types)}) has a live worker" if types
                 else "no pending work", None, facts)


def check_leases(rq: RunnerQ, now: datetime, live_workers: int) -> Check:
    """Activities still processing past their lease (plus a grace): no reaper is running."""
    expired = _count(rq.collections.activities, {
        "status": Status.PROCESSING.value,
        "lease_deadline": {"$lt": now - timedelta(seconds=LEASE_GRACE)}})
    facts = {"expired_over_grace": expired, "grace_seconds": LEASE_GRACE,
             "live_workers": live_workers}
    if expired:
        why = ("no worker is alive to reap them" if not live_workers
               else "live workers run the reaper: check their logs")
        return Check("leases", CheckStatus.FAIL,
                     f"{_activities(expired)} processing more than {LEASE_GRACE:g}s "
                     f"past their lease: {why}",
                     "start a worker (its reaper requeues them)" if not live_workers
                     else "check the workers' logs for reaper errors", facts)
    return Check("leases", CheckStatus.OK, "no lease expired unreaped", None, facts)


def check_outboxes(rq: RunnerQ, now: datetime, live_workers: int) -> Check:
    """Outboxes older than a minute: a writer crashed and no repair has run since."""
    old = _count(rq.collections.activities,
                 {"outbox.since": {"$lt": now - timedelta(seconds=OUTBOX_MAX_AGE)}})
    facts = {"older_than_a_minute": old, "live_workers": live_workers}
    if old:
        return Check("outbox", CheckStatus.FAIL,
                     f"{_activities(old)} with an outbox older than "
                     f"{OUTBOX_MAX_AGE:g}s (their events/results are not copied out yet)",
                     "start a worker: it repairs outboxes every 30 s" if not live_workers
                     else "check the workers' logs for repair errors", facts)
    return Check("outbox", CheckStatus.OK, "no outbox older than a minute", None, facts)


def check_backlog(rq: RunnerQ, now: datetime) -> Check:
    from runnerq_cli.backend.metrics import oldest_pending

    oldest = oldest_pending(rq.collections, now)
    if oldest is None:
        return Check("backlog", CheckStatus.OK, "nothing pending", None, {"oldest_pending": None})
    age = oldest["age_seconds"]
    facts = {"oldest_pending": oldest, "warn_at_seconds": PENDING_AGE_WARN}
    text = f"oldest pending activity waits {age:g}s ({oldest['activity_type']})"
    if age >= PENDING_AGE_WARN:
        return Check("backlog", CheckStatus.WARN, text,
                     "add workers, or see `runnerq-mongo explain "
                     f"{oldest['activity_id']}`", facts)
    return Check("backlog", CheckStatus.OK, text, None, facts)


def check_dead_letters(rq: RunnerQ, now: datetime) -> Check:
    hour = _count(rq.collections.dead_letter,
                  {"failed_at": {"$gte": now - timedelta(hours=1)}})
    facts = {"last_hour": hour}
    if hour:
        return Check("dead letters", CheckStatus.WARN,
                     f"{_at_least(hour)} dead-lettered in the last hour",
                     "runnerq-mongo list dead-letter; redrive once the cause is fixed", facts)
    return Check("dead letters", CheckStatus.OK, "none dead-lettered in the last hour", None,
                 facts)


def server_checks(rq: RunnerQ) -> list[Check]:
    """Checks of the server itself (once per run, whatever the queues)."""
    info = _server_facts(rq)
    return [check_server(rq, info), check_clock(rq, info)]


def queue_checks(rq: RunnerQ) -> list[Check]:
    """Checks of one queue; each is a few bounded, indexed queries."""
    now = _now(rq)
    reports = rq.init_indexes(write=False)
    workers = rq.list_workers(STALE_AFTER)
    live = sum(1 for w in workers if not w.stale)
    pending = _count(rq.collections.activities, {"status": Status.PENDING.value})
    checks = [
        check_indexes(rq, reports),
        check_ttl(rq, reports),
        check_query_plans(rq, now),
        check_workers(rq, workers, pending),
        check_coverage(rq, workers),
        check_leases(rq, now, live),
        check_outboxes(rq, now, live),
        check_backlog(rq, now),
        check_dead_letters(rq, now),
    ]
    return [Check(c.name, c.status, c.message, c.fix, c.facts, rq.queue) for c in checks]


def failed(checks: list[Check], *, strict: bool = False) -> bool:
    """Whether the run fails: any FAIL, or with `strict` any warning too."""
    bad = {CheckStatus.FAIL, CheckStatus.WARN} if strict else {CheckStatus.FAIL}
    return any(c.status in bad for c in checks)


# ------------------------------------------------------------------ explain


@dataclass(frozen=True)
class Explanation:
    """Why an activity is where it is: a sentence, and the facts behind it."""

    activity_id: uuid.UUID
    queue: str
    status: str
    reason: str  # scheduled | backing_off | held | lease_expired | pending | <terminal status>
    sentence: str
    facts: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"activity_id": str(self.activity_id), "queue": self.queue,
                "status": self.status, "reason": self.reason, "sentence": self.sentence,
                "facts": to_jsonable(self.facts)}


def _in(seconds: float) -> str:
    from runnerq_cli.values import format_duration

    return format_duration(abs(seconds))


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else "?"



def _ahead(rq: RunnerQ, priority: int, created_at: datetime) -> dict[str, int]:
    """Pending activities claimed before this one, by priority (claim order, indexed counts)."""
    out: dict[str, int] = {}
    base = {"status": Status.PENDING.value}
    for p in sorted((int(x) for x in Priority), reverse=True):
        if p > priority:
            n = _count(rq.collections.activities, {**base, "priority": p})
        elif p == priority:
            n = _count(rq.collections.activities,
                       {**base, "priority": p, "created_at": {"$lt": created_at}})
        else:
            continue
        if n:
            out[Priority.label(p)] = n
    return out


def locate_activity(rq: RunnerQ, activity_id: uuid.UUID) -> RunnerQ:
    """The backend of the queue holding the activity: this one, else the first other
    queue of the database that has it (one `_id` look-up per queue); NotFound otherwise."""
    if rq.collections.activities.count_documents({"_id": activity_id}, limit=1):
        return rq
    for name in discover_queues(rq.db):
        if name != rq.queue:
            other = rq.for_queue(name)
            if other.collections.activities.count_documents({"_id": activity_id}, limit=1):
                return other
    raise NotFound(f"activity {activity_id} not found (in any queue of database "
                   f"{rq.settings.database!r})")


def _explain_scheduled(act: Any, now: datetime, live: list[Any],
                       facts: dict[str, Any]) -> tuple[str, str]:
    """Delayed at enqueue, or backing off after a failed attempt: until when."""
    due = act.scheduled_at
    wait = (due - now).total_seconds() if due else 0.0
    facts.update(scheduled_at=due, due_in_seconds=round(wait, 3))
    timing = (f"due at {_when(due)} (in {_in(wait)})" if wait > 0 else
              f"due since {_when(due)} ({_in(wait)} ago): the scheduler makes it pending "
              + ("within a poll interval" if live else "once a worker runs (none is live)"))
    if act.retry_count > 0:
        reason = "backing_off"
        sentence = (f"Backing off after attempt {act.retry_count} "
                    f"({act.last_error or 'no error recorded'}); {timing}.")
    else:
        reason = "scheduled"
        sentence = (f"Scheduled for {_when(due)} (in {_in(wait)})." if wait > 0
                    else f"Scheduled: {timing}.")
    return reason, sentence


def _explain_running(act: Any, now: datetime, workers: list[Any], live: list[Any],
                     facts: dict[str, Any]) -> tuple[str, str]:
    """Held under a live lease, or past it: who reaps it, and when."""
    deadline = act.lease_deadline
    holder = next((w for w in workers if w.worker_id == act.worker_id), None)
    facts.update(worker_id=act.worker_id, lease_deadline=deadline, started_at=act.started_at,
                 worker_registered=holder is not None,
                 worker_stale=holder.stale if holder else None)
    if deadline is not None and deadline > now:
        reason = "held"
        sentence = (f"Running: held by worker {act.worker_id} whose lease is live until "
                    f"{_when(deadline)} (in {_in((deadline - now).total_seconds())}).")
        if holder is not None and holder.stale:
            sentence += " That worker has stopped heartbeating: the lease will expire."
    else:
        reason = "lease_expired"
        retry = attempts_remain(act.retry_count, act.max_retries)
        limit = act.max_retries or "unlimited"
        then = (f"requeue it (attempt {act.retry_count + 2} of {limit})" if retry
                else "dead-letter it (no attempts left)")
        facts.update(reaper_will=("requeue" if retry else "dead_letter"))
        if live:
            reap = (f"the reaper of one of the {len(live)} live workers will {then} "
                    "within about 15 s")
        else:
            reap = f"no worker is alive to run the reaper; the first one started will {then}"
        ago = _in((now - deadline).total_seconds()) if deadline else "?"
        sentence = (f"Held by worker {act.worker_id} whose lease expired at "
                    f"{_when(deadline)} ({ago} ago): {reap}.")
    return reason, sentence


def _explain_pending(rq: RunnerQ, act: Any, live: list[Any],
                     facts: dict[str, Any]) -> tuple[str, str]:
    """Its place in claim order, and which live workers handle its type."""
    reason = "pending"
    ahead = _ahead(rq, act.priority, act.created_at)
    handlers = [w.worker_id for w in live if _handles(w, act.activity_type)]
    facts.update(ahead=sum(ahead.values()), ahead_by_priority=ahead,
                 handled_by=handlers[:50])
    total = sum(ahead.values())
    place = (f"{_at_least(total)} ahead of it in claim order ("
             + ", ".join(f"{n} {p}" for p, n in ahead.items()) + ")") if total \
        else "first in claim order"
    verb = "live worker handles" if len(handlers) == 1 else "live workers handle"
    who = (f"{len(handlers)} {verb} {act.activity_type} "
           f"({', '.join(handlers[:3])}{', ...' if len(handlers) > 3 else ''})"
           if handlers else f"no live worker handles {act.activity_type}")
    sentence = f"Pending ({Priority.label(act.priority)} priority): {place}; {who}."
    return reason, sentence


def _explain_finished(act: Any, facts: dict[str, Any]) -> tuple[str, str]:
    """How and when it ended."""
    reason = act.status
    ended = act.completed_at
    facts.update(completed_at=ended)
    error = f": {act.last_error}" if act.last_error else ""
    retries = f" after {act.retry_count} retr{'y' if act.retry_count == 1 else 'ies'}" \
        if act.retry_count else ""
    sentence = {
        Status.COMPLETED.value: f"Completed at {_when(ended)}{retries}.",
        Status.FAILED.value: f"Failed (non-retryable) at {_when(ended)}{error}.",
        Status.DEAD_LETTER.value: (f"Dead-lettered at {_when(ended)} after attempt "
                                   f"{act.retry_count + 1}{error}."),
        Status.CANCELLED.value: f"Cancelled by an operator at {_when(ended)}.",
    }.get(act.status, f"In status {act.status!r}.")
    return reason, sentence


def explain_activity(rq: RunnerQ, activity_id: uuid.UUID | str, *,
                     any_queue: bool = False) -> Explanation:
    """Why the activity is not running (or how it ended); NotFound if there is none.

    With `any_queue`, an activity not in this queue is looked for in the others.
    """
    aid = parse_activity_id(activity_id)
    if any_queue:
        rq = locate_activity(rq, aid)
    act = rq.get_activity(aid)
    now = _now(rq)
    workers = rq.list_workers(STALE_AFTER)
    live = [w for w in workers if not w.stale]
    pause = queue_pause(rq, act.activity_type)
    facts: dict[str, Any] = {
        "activity_type": act.activity_type, "priority": Priority.label(act.priority),
        "attempt": act.retry_count + 1, "max_retries": act.max_retries,
        "created_at": act.created_at, "last_error": act.last_error,
        "live_workers": len(live), "paused": pause is not None}
    status = act.status
    if status == Status.SCHEDULED.value:
        reason, sentence = _explain_scheduled(act, now, live, facts)
    elif status == Status.PROCESSING.value:
        reason, sentence = _explain_running(act, now, workers, live, facts)
    elif status == Status.PENDING.value:
        reason, sentence = _explain_pending(rq, act, live, facts)
    else:
        reason, sentence = _explain_finished(act, facts)
    if pause is not None and status in (Status.PENDING.value, Status.SCHEDULED.value):
        facts["pause"] = pause
        what = f"queue {rq.queue}" if pause.get("all") else f"type {act.activity_type}"
        sentence += f" Its {what} is paused: nothing is claimed until it is resumed."
    return Explanation(aid, rq.queue, status, reason, sentence, facts)

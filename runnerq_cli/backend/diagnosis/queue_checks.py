"""Checks of one queue: indexes, TTL, query plans, workers, leases, timeouts, outboxes,
backlog, dead letters, pauses and malformed documents.

Every query is bounded: indexed counts with a limit, single index seeks,
`distinct` over an index, the worker registry (one document per worker
process), the running activities under a live lease (bounded by the workers'
concurrency, read up to SHAPE_SCAN_LIMIT), and for malformed documents a scan of at
most SHAPE_SCAN_LIMIT live documents. Nothing scans a queue's finished history.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli.backend.diagnosis.checks import (
    PENDING_AGE_WARN,
    TYPES_LIMIT,
    activities,
    at_least,
    count,
)
from runnerq_cli.backend.diagnosis.limit_checks import check_limits
from runnerq_cli.backend.diagnosis.partition_checks import check_partitions
from runnerq_cli.backend.diagnosis.plans import explain_query, plan_problems, plan_stages
from runnerq_cli.backend.diagnosis.server_checks import topology_of
from runnerq_cli.backend.diagnosis.wait_checks import check_trees, check_waits, scan_waits
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.checks import Check, CheckStatus
from runnerq_cli.backend.domain.models import MalformedDocument, Status, display_time
from runnerq_cli.backend.domain.pause import PauseState
from runnerq_cli.backend.domain.queries import representative_queries
from runnerq_cli.backend.domain.shapes import MALFORMED_LIMIT, SHAPE_SCAN_LIMIT
from runnerq_cli.backend.domain.sizes import ACTIVITY_TYPE_MAX
from runnerq_cli.backend.domain.snapshots import OldestPending
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.backend.queue.workers import WorkerInfo, WorkerRegistry
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.indexes import IndexReport, ensure_indexes
from runnerq_cli.backend.views.failures import FailureGroup, group_failures
from runnerq_cli.backend.views.shape_scan import malformed
from runnerq_cli.errors import CommandFailed
from runnerq_cli.plural import agreeing, counted
from runnerq_cli.times import format_duration


def _init_command(queue: str) -> str:
    return f"runnerq-mongo --queue {queue} init-indexes"


def check_indexes(ctx: QueueContext, reports: list[IndexReport]) -> Check:
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
                     f"{counted(len(conflict), 'index')} "
                     f"{agreeing(len(conflict), 'differs', 'differ')} from the plan, e.g. "
                     f"{first.collection_name} {first.spec.name}: {first.difference}",
                     "drop the differing index, then run "
                     f"`{_init_command(ctx.settings.queue)}`", facts)
    if missing and len(missing) == len(plain):
        from runnerq_cli.backend.store.discovery import absent_queue

        absent = absent_queue(ctx.db, ctx.settings.queue)
        if absent is not None:  # a typo of --queue? init-indexes would make that queue
            return Check("indexes", CheckStatus.FAIL, f"{absent}: none of its "
                         f"{counted(len(reports), 'index')}", "check --queue and --database; for a "
                         f"new queue, run `{_init_command(ctx.settings.queue)}`", facts)
    if missing:
        return Check("indexes", CheckStatus.FAIL,
                     f"{len(missing)} of {counted(len(reports), 'index')} missing, e.g. "
                     f"{missing[0].collection_name} {missing[0].spec.name}",
                     f"run `{_init_command(ctx.settings.queue)}`", facts)
    # The count `init-indexes` prints (every planned index), the TTL ones checked apart.
    ttl = len(reports) - len(plain)
    return Check("indexes", CheckStatus.OK,
                 f"all {counted(len(reports), 'index')} present ({ttl} of them TTL, checked below)",
                 None, facts)


def check_ttl(ctx: QueueContext, reports: list[IndexReport]) -> Check:
    """TTL indexes present with the configured expiry; on a real server, the TTL monitor on."""
    ttl = [r for r in reports if "expireAfterSeconds" in r.spec.options]
    bad = [r for r in ttl if r.state.value != "present"]
    facts: dict[str, Any] = {r.collection_name: {"expireAfterSeconds":
                                                  r.spec.options["expireAfterSeconds"],
                                                  "state": r.state.value,
                                                  "difference": r.difference or None}
                             for r in ttl}
    try:
        param = ctx.db.admin_command("getParameter", 1, ttlMonitorEnabled=1)
        monitor = bool(param.get("ttlMonitorEnabled", True))
        facts["ttl_monitor"] = "enabled" if monitor else "disabled"
    except Exception:
        monitor = None
        facts["ttl_monitor"] = "not checked (getParameter refused)"
    if bad:
        first = bad[0]
        what = first.difference or "missing"
        fix = (f"run `{_init_command(ctx.settings.queue)}`" if first.state.value == "missing" else
               f"drop the TTL index {first.spec.name} on {first.collection_name} (or change "
               f"the setting to match it), then run `{_init_command(ctx.settings.queue)}`")
        others = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        said = (f"TTL index {first.spec.name} on {first.collection_name} missing{others}"
                if first.state.value == "missing" else
                f"TTL index on {first.collection_name} {first.state.value}: {what}{others}")
        return Check("ttl", CheckStatus.FAIL, said, fix, facts)
    if monitor is False:
        return Check("ttl", CheckStatus.FAIL, "the server's TTL monitor is disabled: results, "
                     "idempotency keys and events never expire",
                     "setParameter ttlMonitorEnabled=true", facts)
    suffix = "" if monitor else " (TTL monitor not checked)"
    return Check("ttl", CheckStatus.OK, f"{counted(len(ttl), 'TTL index')} present{suffix}",
                 None, facts)


def _partition_count(ctx: QueueContext) -> int:
    """The stored partition count; 1 for a malformed one (the partitions check says so)."""
    try:
        return ctx.partitions.current()
    except MalformedDocument:
        return 1


def check_query_plans(ctx: QueueContext, now: datetime, partitions: int = 1) -> Check:
    """Each representative query served by an index (no COLLSCAN, no in-memory SORT)."""
    served, problems, unknown = [], [], []
    for query in representative_queries(ctx.settings, now, partitions=partitions):
        try:
            stage_names = plan_stages(explain_query(ctx.db, ctx.names, ctx.settings, query))
        except CommandFailed as exc:
            problems.append(f"{query.name}: explain failed ({str(exc)[:120]})")
            continue
        if stage_names is None:  # not MongoDB's explain: no other answer will be either
            unknown = [q.name for q in representative_queries(ctx.settings, now,
                                                               partitions=partitions)
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
                     f"{counted(len(problems), 'query')} not served by an index: "
                     + "; ".join(problems),
                     f"run `{_init_command(ctx.settings.queue)}` (a missing index); "
                     "otherwise report it", facts)
    if unknown and not served:
        return Check("query plans", CheckStatus.NOT_CHECKED,
                     "the server's explain is not MongoDB's (dev server): not checked", None,
                     facts)
    return Check("query plans", CheckStatus.OK,
                 f"all {counted(len(served), 'query')} served by an index", None, facts)


def _handles(worker: WorkerInfo, activity_type: str) -> bool:
    return not worker.types or activity_type in worker.types


def check_workers(ctx: QueueContext, workers: list[WorkerInfo], pending: int) -> Check:
    live = [w for w in workers if not w.stale]
    stale = [w for w in workers if w.stale]
    in_flight = sum(w.in_flight for w in live)
    facts = {"live": len(live), "stale": len(stale), "in_flight": in_flight,
             "stale_workers": [{"id": w.worker_id, "host": w.host, "pid": w.pid,
                                "last_heartbeat": w.last_heartbeat} for w in stale[:20]]}
    if stale:
        first = stale[0]
        return Check("workers", CheckStatus.FAIL,
                     f"{counted(len(stale), 'stale worker')} "
                     f"(no heartbeat for {format_duration(TIMING.worker_stale_after)}), e.g. "
                     f"{first.worker_id} on {first.host} pid {first.pid}; {len(live)} live",
                     "check those processes; a dead worker's entry expires after 10 minutes "
                     "and its activities return when their leases expire", facts)
    if not live:
        status = CheckStatus.WARN if pending else CheckStatus.OK
        return Check("workers", status, "no live workers", "start a worker: runnerq-mongo worker"
                     if pending else None, facts)
    return Check("workers", CheckStatus.OK,
                 f"{len(live)} live, {counted(in_flight, 'activity')} in flight",
                 None, facts)


def check_coverage(ctx: QueueContext, workers: list[WorkerInfo],
                   pause: PauseState | None = None) -> Check:
    """Activity types with due (pending) work and no live worker that handles them.

    A paused type (or a paused queue) is waiting on purpose: no worker would claim it
    anyway, so it is named as paused, not failed (the `pause` check says since when, why).
    """
    pause = pause or PauseState()
    live = [w for w in workers if not w.stale]
    types = [t for t in ctx.activities.distinct(
        "activity_type", {"status": Status.PENDING.value})[:TYPES_LIMIT] if isinstance(t, str)]
    without = sorted(t for t in types if not any(_handles(w, t) for w in live))
    held = [t for t in without if pause.all or t in pause.types]
    orphans = [t for t in without if t not in held]

    def pending_of(names: list[str]) -> dict[str, int]:
        return {t: count(ctx.activities, {"status": Status.PENDING.value,
                                          "activity_type": t}) for t in names[:20]}

    def listed(found: dict[str, int]) -> str:
        return ", ".join(f"{t} ({at_least(n)} pending)" for t, n in found.items())

    facts: dict[str, Any] = {"pending_types": len(types), "without_worker": pending_of(orphans),
                             "paused_without_worker": pending_of(held)}
    paused_note = (f"; paused: {listed(facts['paused_without_worker'])}" if held else "")
    if orphans:
        return Check("coverage", CheckStatus.FAIL,
                     f"no live worker handles {listed(facts['without_worker'])}{paused_note}",
                     "start a worker with a handler for each (runnerq-mongo worker "
                     "--handler TYPE=MOD:FUNC or --exec TYPE=COMMAND)", facts)
    if held:
        return Check("coverage", CheckStatus.OK,
                     f"no live worker handles {listed(facts['paused_without_worker'])}, "
                     "paused on purpose", None, facts)
    return Check("coverage", CheckStatus.OK,
                 f"every pending type ({len(types)}) has a live worker" if types
                 else "no pending work", None, facts)


def check_leases(ctx: QueueContext, now: datetime, live_workers: int) -> Check:
    """Activities still processing past their lease (plus a grace): no reaper is running."""
    expired = count(ctx.activities,
                    queries.expired_leases(now - timedelta(seconds=TIMING.lease_overdue)).filter)
    facts = {"expired_over_grace": expired, "grace_seconds": TIMING.lease_overdue,
             "live_workers": live_workers}
    if expired:
        why = ("no worker is alive to reap them" if not live_workers
               else "live workers run the reaper: check their logs")
        return Check("leases", CheckStatus.FAIL,
                     f"{activities(expired)} processing more than "
                     f"{format_duration(TIMING.lease_overdue)} past their lease: {why}",
                     "start a worker (its reaper requeues them)" if not live_workers
                     else "check the workers' logs for reaper errors", facts)
    return Check("leases", CheckStatus.OK, "no lease expired unreaped", None, facts)


def _overdue(doc: dict[str, Any], now: datetime) -> float | None:
    """Seconds past its timeout (plus the grace) of one running attempt, counted from its
    claim (`started_at`, the server's time of it), or None.

    The claim is the base because it is the worker's: a worker claims only for a free
    slot (no prefetch) and starts the attempt's timeout clock as the claim returns
    (worker/claiming.py `_begin`), before the slot's thread calls the handler
    (milliseconds later; a handler not started within one lease fails the attempt). A
    stored handler start would differ from `started_at` by that hand-off alone. The
    grace covers the claim's reply, a handler that times itself out (a shell's kill,
    7 s), the lease keeper's tick and the failure's write. Fields of another type are
    the `documents` check's to name."""
    started, timeout = doc.get("started_at"), doc.get("timeout_seconds", 300)
    if (not isinstance(started, datetime) or isinstance(timeout, bool)
            or not isinstance(timeout, int | float)):
        return None
    over = (now - started).total_seconds() - float(timeout) - TIMING.timeout_overdue
    return over if over > 0 else None


def check_timeouts(ctx: QueueContext, now: datetime) -> Check:
    """Activities held under a live lease long past their `timeout_seconds`: a worker fails
    an attempt at its timeout, so a lease still renewed then belongs to a slot that no
    longer runs its handler (a dead slot thread): the activity would never end, and the
    `leases` check cannot see it (the lease never expires)."""
    query = queries.live_leases(now)
    found = []
    for doc in ctx.activities.find(query.filter, {"started_at": 1, "timeout_seconds": 1,
                                                  "worker_id": 1}).limit(SHAPE_SCAN_LIMIT):
        over = _overdue(doc, now)
        if over is not None:
            found.append({"id": str(doc["_id"]), "worker_id": doc.get("worker_id"),
                          "timeout_seconds": doc.get("timeout_seconds", 300),
                          "running_seconds": round((now - doc["started_at"])
                                                   .total_seconds(), 3)})
    facts: dict[str, Any] = {"held_past_timeout": found[:MALFORMED_LIMIT],
                             "count": len(found), "grace_seconds": TIMING.timeout_overdue}
    if not found:
        return Check("timeouts", CheckStatus.OK,
                     "no running activity held past its timeout", None, facts)
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    workers = sorted({str(f["worker_id"]) for f in found})
    return Check("timeouts", CheckStatus.FAIL,
                 f"{activities(len(found))} held more than "
                 f"{format_duration(TIMING.timeout_overdue)} past their timeout (counted from "
                 "the claim, as workers count it) while "
                 f"their lease is renewed, e.g. {first['id']} "
                 f"({format_duration(first['running_seconds'])} since the claim, timeout "
                 f"{format_duration(first['timeout_seconds'])}, "
                 f"worker {first['worker_id']}){more}: their worker renews a claim it "
                 "no longer runs",
                 f"restart worker {', '.join(workers[:MALFORMED_LIMIT])} (a stopped worker's "
                 "claims expire and are retried); report the worker's logs as a bug", facts)


def check_outboxes(ctx: QueueContext, now: datetime, live_workers: int) -> Check:
    """Outboxes older than a minute: a writer crashed and no repair has run since."""
    old = count(ctx.activities,
                queries.stale_outboxes(now - timedelta(seconds=TIMING.outbox_overdue)).filter)
    facts = {"older_than_a_minute": old, "live_workers": live_workers}
    if old:
        return Check("outbox", CheckStatus.FAIL,
                     f"{activities(old)} with an outbox older than "
                     f"{format_duration(TIMING.outbox_overdue)} (their events/results are not "
                     "copied out yet)",
                     "start a worker: it repairs outboxes every "
                     f"{format_duration(TIMING.repair_every)}"
                     if not live_workers
                     else "check the workers' logs for repair errors", facts)
    return Check("outbox", CheckStatus.OK, "no outbox older than a minute", None, facts)


def pending_now(ctx: QueueContext, now: datetime) -> tuple[int, OldestPending | None]:
    """The pending count and the oldest pending activity, made to agree (two reads, work
    moving in between): doctor never says "no pending work" beside "oldest pending waits
    8.65 s". Nothing counted: no oldest; counted but the oldest gone: read it again."""
    from runnerq_cli.backend.views.metrics import oldest_pending

    oldest = oldest_pending(ctx, now)
    pending = count(ctx.activities, {"status": Status.PENDING.value})
    if not pending:
        return 0, None
    return pending, oldest if oldest is not None else oldest_pending(ctx, now)


def check_backlog(ctx: QueueContext, pause: PauseState,
                  oldest: OldestPending | None) -> Check:
    """The oldest pending activity's wait; when a pause holds its type, the pause is why."""
    if oldest is None:
        return Check("backlog", CheckStatus.OK, "nothing pending", None, {"oldest_pending": None})
    age = oldest["age_seconds"]
    facts: dict[str, Any] = {"oldest_pending": oldest, "warn_at_seconds": PENDING_AGE_WARN}
    text = f"oldest pending activity waits {format_duration(age)} ({oldest['activity_type']})"
    held = pause.active and (pause.all or oldest["activity_type"] in pause.types)
    if held:
        facts["paused"] = pause.to_json()
        what = "the queue" if pause.all else f"type {oldest['activity_type']}"
        text += f": {what} is paused, nothing of it is claimed"
    if age >= PENDING_AGE_WARN:
        if held:
            return Check("backlog", CheckStatus.WARN, text,
                         f"runnerq-mongo --queue {ctx.settings.queue} resume"
                         + ("" if pause.all else f" --type {oldest['activity_type']}")
                         + " (when the pause's reason is gone)", facts)
        return Check("backlog", CheckStatus.WARN, text,
                     "add workers, or see `runnerq-mongo explain "
                     f"{oldest['activity_id']}`", facts)
    return Check("backlog", CheckStatus.OK, text, None, facts)


def check_pause(ctx: QueueContext, pause: PauseState) -> Check:
    """An active pause: what, since when, by whom, why (workers claim none of it)."""
    if not pause.active:
        return Check("pause", CheckStatus.OK, "not paused", None, {"paused": None})
    return Check("pause", CheckStatus.WARN, pause.describe(),
                 f"runnerq-mongo --queue {ctx.settings.queue} resume when it should run again",
                 {"paused": pause.to_json()})


def check_documents(ctx: QueueContext) -> Check:
    """Documents whose fields have the wrong type (another program's, or a hand edit):
    readers skip them; here they are named (collection, id, what is wrong)."""
    found = malformed(ctx)
    facts: dict[str, Any] = {"malformed": [m.to_json() for m in found]}
    if not found:
        return Check("documents", CheckStatus.OK,
                     "no malformed document among live and dead-lettered activities, workers "
                     "and controls", None, facts)
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return Check("documents", CheckStatus.WARN,
                 f"{counted(len(found), 'malformed document')}, e.g. "
                 f"{first.collection} {first.id}: {first.problem}{more}",
                 "correct the field as docs/design.md says (the program that wrote it has a "
                 "bug) or delete the document; readers skip a malformed one, workers "
                 "dead-letter a malformed activity they claim without running it, and "
                 f"claim none whose activity_type is not text of 1-{ACTIVITY_TYPE_MAX} "
                 "characters (set one, or delete it)"
                 + (f" (runnerq-mongo explain {first.id})"
                    if first.collection == ctx.activities.name else ""), facts)


DOCTOR_GROUPS = 3  # the failing groups doctor names (facts carry them; `stats --by error` all)
ERROR_SHOWN = 60  # characters of an error in doctor's line


def describe_group(group: FailureGroup) -> str:
    """One failing group in a sentence: type, error (cut), how many, when, an example."""
    error = group.error if len(group.error) <= ERROR_SHOWN else group.error[:ERROR_SHOWN] + "…"
    what = f"{group.dead_letter} dead-lettered, " if group.dead_letter else ""
    return (f"{group.activity_type}: \"{error}\" ({what}{counted(group.count, 'failed attempt')}, "
            f"{display_time(group.first_seen)} to {display_time(group.last_seen)}, "
            f"e.g. {group.example_id})")


def check_dead_letters(ctx: QueueContext, now: datetime) -> Check:
    """Dead letters of the last hour, and what is failing: the largest groups of failed
    attempts by type and error (failures.py), so the line says where to look."""
    hour = count(ctx.dead_letter, {"failed_at": {"$gte": now - timedelta(hours=1)}})
    failing = group_failures(ctx, now - timedelta(seconds=queries.FAILURES_SAMPLE),
                             DOCTOR_GROUPS)
    facts: dict[str, Any] = {"last_hour": hour,
                             "failing": [group.to_json() for group in failing.groups],
                             "failing_groups": failing.total_groups}
    more = failing.total_groups - len(failing.groups)
    named = "; ".join(describe_group(group) for group in failing.groups) + (
        f"; and {more} more (runnerq-mongo stats --by error)" if more > 0 else "")
    if hour:
        return Check("dead letters", CheckStatus.WARN,
                     f"{at_least(hour)} dead-lettered in the last hour; failing: {named}",
                     "runnerq-mongo list dead-letter --type TYPE --error-contains TEXT; "
                     "redrive --error-contains TEXT once the cause is fixed", facts)
    if failing.groups:
        return Check("dead letters", CheckStatus.OK,
                     f"none dead-lettered in the last hour; failed attempts: {named}", None,
                     facts)
    return Check("dead letters", CheckStatus.OK, "none dead-lettered in the last hour", None,
                 facts)


class QueueChecks:
    """The doctor's checks of one queue, given what they read."""

    def __init__(self, ctx: QueueContext, registry: WorkerRegistry,
                 paused: Callable[[], PauseState]) -> None:
        self._ctx = ctx
        self._registry = registry
        self._paused = paused

    def run(self) -> list[Check]:
        """Each check is a few bounded, indexed queries."""
        ctx = self._ctx
        now = ctx.clock()
        partitions = _partition_count(ctx)
        reports = ensure_indexes(ctx.db, ctx.settings, write=False, partitions=partitions)
        workers = self._registry.list_workers(TIMING.worker_stale_after)
        live = sum(1 for w in workers if not w.stale)
        pending, oldest = pending_now(ctx, now)
        pause = self._paused()
        checks = [
            check_indexes(ctx, reports),
            check_ttl(ctx, reports),
            check_query_plans(ctx, now, partitions),
            check_workers(ctx, workers, pending),
            check_coverage(ctx, workers, pause),
            check_leases(ctx, now, live),
            check_timeouts(ctx, now),
            check_outboxes(ctx, now, live),
            check_pause(ctx, pause),
            check_backlog(ctx, pause, oldest),
            check_dead_letters(ctx, now),
            check_documents(ctx),
            *check_limits(ctx, workers, now),
            check_partitions(ctx, topology_of(ctx.db.admin_command("hello"))),
        ]
        scan = scan_waits(ctx, now)
        checks[-1:-1] = [check_waits(ctx, scan), check_trees(scan)]
        return [Check(c.name, c.status, c.message, c.fix, c.facts, ctx.settings.queue)
                for c in checks]

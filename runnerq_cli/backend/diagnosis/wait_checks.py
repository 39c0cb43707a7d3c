"""Doctor's checks of durable waits (docs/design.md, "Durable activities"): waits that can
never wake, and trees stuck behind a finished child whose parent was never woken.

Bounded like the other checks: one indexed read of at most WAIT_SCAN_LIMIT waiting
activities that await a result (`waiting_result_id_1_waiting`), one `$in` read of their
producers, a result read for each suspect only (a producer gone or finished: at most
SUSPECTS_READ of them), and one limited read of waits with nothing to wake them
(`scheduled_at_1__id_1_waiting`). A queue with more waits on results than the bound is
looked at in part, and the check says so.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli.backend.diagnosis.checks import activities
from runnerq_cli.backend.domain.checks import Check, CheckStatus
from runnerq_cli.backend.domain.models import TERMINAL_STATUSES, Status
from runnerq_cli.backend.domain.queries import Query, doctor_waits
from runnerq_cli.backend.domain.shapes import MALFORMED_LIMIT
from runnerq_cli.backend.queue.durable import REPAIR_GRACE
from runnerq_cli.backend.queue.results import Results
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.hints import hinted
from runnerq_cli.plural import counted
from runnerq_cli.times import format_duration

WAIT_SCAN_LIMIT = 10_000  # waits on a result looked at per doctor run
SUSPECTS_READ = 100  # awaits whose producer is gone or finished: their results read
# A finished child's parent still waiting this long after its park was missed by both
# the publisher's wake and wake repair (every 15 s, for parks older than 30 s).
WAKE_OVERDUE = REPAIR_GRACE + timedelta(seconds=30)


@dataclass
class WaitScan:
    """What the two checks read once: the suspects, each as (waiter, result id, why)."""

    looked_at: int = 0
    complete: bool = True
    suspects: int = 0  # awaits whose producer is gone or finished (SUSPECTS_READ judged)
    never: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[dict[str, Any]] = field(default_factory=list)

    @property
    def partial(self) -> str:
        """What was left unjudged, in words ("" when nothing was)."""
        if not self.complete:
            return f" (the first {WAIT_SCAN_LIMIT:,} waits on a result looked at)"
        if self.suspects > SUSPECTS_READ:
            return (f" (the first {SUSPECTS_READ} of "
                    f"{counted(self.suspects, 'suspect', number=f'{self.suspects:,}')} judged)")
        return ""


def _found(ctx: QueueContext, query: Query, projection: dict[str, Any],
           limit: int) -> list[dict[str, Any]]:
    """A limited find of `query` on its index (queries.doctor_waits: hinted, so a
    planner never prefers another index to the partial waiting one)."""
    def run(hint: str | None) -> list[dict[str, Any]]:
        cursor = ctx.activities.find(query.filter, projection, limit=limit)
        return list(cursor if hint is None else cursor.hint(hint))
    return hinted(str(query.index(ctx.settings)), run, "activities")


def _awaits(doc: Mapping[str, Any]) -> bool:
    """An await of another activity's result, as our park writes it. A signal can always
    still come; another program's wait without `parked` may be a signal's: not judged."""
    parked = doc.get("parked")
    kind = parked.get("kind") if isinstance(parked, dict) else None
    return kind == "await" and isinstance(doc.get("waiting_result_id"), uuid.UUID)


def _parked_long_ago(doc: Mapping[str, Any], now: datetime) -> bool:
    parked = doc.get("parked")
    at = parked.get("at") if isinstance(parked, dict) else None
    return not isinstance(at, datetime) or now - at > WAKE_OVERDUE


def scan_waits(ctx: QueueContext, now: datetime) -> WaitScan:
    """Waiting activities awaiting a result that will never come (its producer gone, or
    finished without a result), and those whose producer finished long ago though they
    still wait (a missed wake: a tree stuck behind its child)."""
    scan = WaitScan()
    docs = _found(ctx, doctor_waits()[0],
                  {"activity_type": 1, "parked": 1, "waiting_result_id": 1},
                  WAIT_SCAN_LIMIT + 1)
    scan.complete = len(docs) <= WAIT_SCAN_LIMIT
    docs = [d for d in docs[:WAIT_SCAN_LIMIT] if _awaits(d) and _parked_long_ago(d, now)]
    scan.looked_at = len(docs)
    producers = {p["_id"]: p for p in ctx.activities.find(
        {"_id": {"$in": list({d["waiting_result_id"] for d in docs})}},
        {"status": 1})} if docs else {}
    suspects = [(d, producers.get(d["waiting_result_id"])) for d in docs]
    suspects = [(d, p) for d, p in suspects
                if p is None or p.get("status") in TERMINAL_STATUSES]
    scan.suspects = len(suspects)
    results = Results(ctx)
    for doc, producer in suspects[:SUSPECTS_READ]:
        rid = doc["waiting_result_id"]
        entry = {"id": str(doc["_id"]), "activity_type": doc.get("activity_type"),
                 "waits_for": str(rid)}
        if producer is None:
            if not _stored(ctx, rid):
                scan.never.append({**entry, "producer": "gone"})
            continue
        status = str(producer.get("status"))
        shown = "dead-lettered" if status == Status.DEAD_LETTER.value else status
        if results.get_result(rid) is None:
            scan.never.append({**entry, "producer": f"{shown}, no result"})
        else:
            scan.stuck.append({**entry, "producer": shown, "producer_status": status})
    return scan


def _stored(ctx: QueueContext, result_id: uuid.UUID) -> bool:
    """A result kept after its activity aged out, or a checkpoint with that id."""
    return (ctx.results.find_one({"_id": result_id}, {"_id": 1}) is not None
            or ctx.checkpoints.find_one({"_id": result_id}, {"_id": 1}) is not None)


def no_wake_time(ctx: QueueContext) -> list[dict[str, Any]]:
    """Waiting activities with neither a wake time nor a result to wait for (a spawn not
    confirmed yet excepted: wake repair settles those): nothing will ever wake them."""
    return [{"id": str(d["_id"]), "activity_type": d.get("activity_type"),
             "waits_for": None, "producer": "nothing: no wake time, no result"}
            for d in _found(ctx, doctor_waits()[1], {"activity_type": 1},
                            MALFORMED_LIMIT + 1)]


def _listed(found: list[dict[str, Any]]) -> str:
    first = found[0]
    what = (f"waits for {first['waits_for']} ({first['producer']})" if first["waits_for"]
            else f"waits for {first['producer']}")
    return f"e.g. {first['id']} ({first['activity_type']}) {what}"


def check_waits(ctx: QueueContext, scan: WaitScan) -> Check:
    """Waits that can never wake: their awaited result will never be stored (its producer
    is gone, or finished without one), or they have no wake time and no result at all."""
    unwoken = no_wake_time(ctx)
    never = [*unwoken, *scan.never]
    facts: dict[str, Any] = {"never_wake": never[:MALFORMED_LIMIT],
                             "awaits_looked_at": scan.looked_at,
                             "all_looked_at": scan.complete and scan.suspects <= SUSPECTS_READ}
    # The waits with no wake time are read up to MALFORMED_LIMIT + 1: past that, "at least".
    counted_never = (f"at least {len(never)}" if len(unwoken) > MALFORMED_LIMIT
                     else str(len(never)))
    if not never:
        return Check("waits", CheckStatus.OK,
                     f"no waiting activity that can never wake{scan.partial}", None, facts)
    first = never[0]["id"]
    return Check("waits", CheckStatus.FAIL,
                 f"{counted(len(never), 'activity', number=counted_never)} waiting for "
                 "something that will never come, "
                 f"{_listed(never)}{scan.partial}",
                 f"`runnerq-mongo run-now {first}` wakes it (its handler replays from its "
                 f"checkpoints and meets the missing result), or `runnerq-mongo cancel {first}`"
                 " ends it", facts)


def check_trees(scan: WaitScan) -> Check:
    """Trees stuck behind a finished child: the child's result is stored (dead-lettered,
    failed, cancelled or completed) but its parent still waits, past what the publisher's
    wake and wake repair take. Should not happen; shown so it can be unstuck."""
    stuck = scan.stuck
    facts: dict[str, Any] = {"stuck": stuck[:MALFORMED_LIMIT],
                             "overdue_seconds": WAKE_OVERDUE.total_seconds()}
    if not stuck:
        return Check("trees", CheckStatus.OK, "no tree stuck behind a finished child",
                     None, facts)
    dead = sum(1 for s in stuck if s["producer_status"] == Status.DEAD_LETTER.value)
    first = stuck[0]["id"]
    return Check("trees", CheckStatus.FAIL,
                 f"{activities(len(stuck))} still waiting more than "
                 f"{format_duration(WAKE_OVERDUE.total_seconds())} on a child that "
                 f"finished ({dead} dead-lettered), {_listed(stuck)}: its wake was "
                 f"missed{scan.partial}",
                 f"`runnerq-mongo run-now {first}` wakes it (its handler replays and meets "
                 "the child's result or error); a live worker's wake repair does the same "
                 "for every one: if none runs, start one", facts)

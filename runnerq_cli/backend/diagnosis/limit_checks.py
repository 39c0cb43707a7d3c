"""`doctor`'s check of the flow limits (docs/design.md, "Flow control"): a limit stored
that no claimer can honour (zero, negative, not a whole number: our commands refuse
them, another program may write them), slots held past their leases by claims that no
longer run, and a limit far below the concurrency of the workers that claim its type.

Bounded: one read of the limit documents (one per limited type), one read of the
running activities among the expired holders' leases (bounded by the holders), and the
worker registry the other checks read already. A queue without limits gets no check.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from runnerq_cli import values
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.checks import Check, CheckStatus
from runnerq_cli.backend.domain.flow import LIMIT_FIELDS, MOST_LIMIT, entries
from runnerq_cli.backend.queue.workers import WorkerInfo
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.plural import counted

FAR_BELOW = 4  # workers' total concurrency at least this many times the limit: warn
NAME = "limits"


def check_limits(ctx: QueueContext, workers: list[WorkerInfo], now: datetime) -> list[Check]:
    """One check named `limits` (none for a queue without limits): FAIL for a limit no
    claimer can honour, WARN for stale slots or a limit far below its workers."""
    docs = list(ctx.limits.find({}, {"starts": 0}).sort([("_id", 1)]))
    if not docs:
        return []
    bad = [p for doc in docs for p in _bad_values(doc)]
    facts: dict[str, Any] = {"limits": len(docs), "bad_values": bad}
    if bad:
        return [Check(NAME, CheckStatus.FAIL, f"{bad[0]}: no claimer can honour it",
                      "set it again with the command, which refuses such values: "
                      "runnerq-mongo limit set TYPE --concurrency N (or limit remove TYPE)",
                      facts)]
    stale = _stale_holders(ctx, docs, now)
    facts["stale_slots"] = stale
    if stale:
        first = stale[0]
        key = f"key {first['key']}" if first["key"] else "work without a key"
        return [Check(NAME, CheckStatus.WARN,
                      f"{first['activity_type']}: {key} holds "
                      f"{counted(first['slots'], 'slot')} past their leases (worker "
                      f"{first['worker']}); its claims no longer run",
                      "they are freed by the next claim of "
                      f"{first['activity_type']} (a worker that claims it must run); or "
                      "limit remove and set it again",
                      facts)]
    wide = _far_below(docs, workers)
    facts["far_below"] = wide
    if wide:
        first = wide[0]
        return [Check(NAME, CheckStatus.WARN,
                      f"{first['activity_type']}: a limit of {first['concurrency']} beside "
                      f"{counted(first['workers_concurrency'], 'handler slot')} of the live "
                      "workers that claim it",
                      "slots kept for work the limit never lets start: lower the workers' "
                      "--concurrency, give them other types, or raise the limit", facts)]
    return [Check(NAME, CheckStatus.OK, f"{counted(len(docs), 'limit')}, every one honoured",
                  None, facts)]


def _bad_values(doc: Mapping[str, Any]) -> list[str]:
    """A limit field stored with a value no claimer can honour, in words."""
    out = []
    for field in LIMIT_FIELDS:
        if field not in doc:
            continue
        value = doc[field]
        number = value.get("count") if isinstance(value, Mapping) and "rate" in field \
            else value
        period = value.get("period_ms", 1000) if isinstance(value, Mapping) else 1000
        whole = isinstance(number, int) and not isinstance(number, bool) \
            and 1 <= number <= MOST_LIMIT
        if not whole or not isinstance(period, int) or period < 1000:
            out.append(f"{doc['_id']}: {field} {values.shown(value)} stored")
    if not any(field in doc for field in LIMIT_FIELDS):
        out.append(f"{doc['_id']}: no limit stored")
    return out


def _stale_holders(ctx: QueueContext, docs: list[dict[str, Any]],
                   now: datetime) -> list[dict[str, Any]]:
    """Holders past their `until` whose lease no longer runs, grouped by type and key."""
    expired = {str(h["l"]): (str(doc["_id"]), str(h.get("k") or ""), str(h.get("w")))
               for doc in docs for h in entries(doc, "holders")
               if isinstance(h.get("until"), datetime)
               and h["until"] < now and isinstance(h.get("l"), str)}
    if not expired:
        return []
    query = queries.running_leases(expired)
    running = {d.get("lease_id") for d in ctx.activities.find(query.filter, {"lease_id": 1})}
    groups: dict[tuple[str, str, str], int] = {}
    for lease, where in expired.items():
        if lease not in running:
            groups[where] = groups.get(where, 0) + 1
    return [{"activity_type": t, "key": k, "worker": w, "slots": n}
            for (t, k, w), n in sorted(groups.items(), key=lambda kv: -kv[1])]


def _far_below(docs: list[dict[str, Any]], workers: list[WorkerInfo]) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        limit = doc.get("concurrency")
        if not isinstance(limit, int) or limit < 1:
            continue
        kind = str(doc["_id"])
        total = sum(w.concurrency for w in workers
                    if not w.stale and (not w.types or kind in w.types))
        if total >= FAR_BELOW * limit:
            out.append({"activity_type": kind, "concurrency": limit,
                        "workers_concurrency": total})
    return out

"""What one claim around paused types makes the server examine, beside a paused backlog.

Issue 32: a worker claiming every type while a big type is paused must not pay for the
paused backlog on each claim. The script builds a queue with `--paused` pending
activities of a paused type `big` (priority high, older: all of them ahead of the
claimable work in claim order, the worst case) and `--claimable` pending activities of
five other types (priority normal), then claims the claimable ones one by one as a
worker does (`dequeue(exclude_types=["big"])`), and, for each claim, what it and the
look-ups before it make the server examine; beside it, what the claim of the previous
version (`activity_type: {$nin: ["big"]}` on the claim-order index) would examine at
the same moment. Run with `--paused 0` the same claims show the cost without a backlog.

- on a real MongoDB (`RUNNERQ_BENCH_MONGO_URI`): `explain` (executionStats) of every
  find and findAndModify the claims sent, and of the old claim as a find with its
  filter, sort, limit 1 and the claim-order index as hint: totalKeysExamined and
  totalDocsExamined;
- on the dev server (its indexes are not real; its explain is not MongoDB's): what the
  query shapes imply on the indexes of docs/design.md. A `$nin` on the claim-order
  index (its keys hold no type) fetches each document in claim order until one is not
  paused: keys = documents = the pending activities ahead of the first claimable one,
  plus one. A look-up for pending types (`$nin` on the type index's first key, limit 1)
  reads at most one key, after one seek per range between the known types. The claim
  (`$in` on the type index, merged in claim order) reads the first key of each type's
  range and one document.

    python benchmarks/bench_paused_claims.py                       # 10,000 paused, 10 claimable
    python benchmarks/bench_paused_claims.py --paused 0            # the same without the backlog
    RUNNERQ_BENCH_MONGO_URI=mongodb://localhost:27017 python benchmarks/bench_paused_claims.py

Figures: benchmarks/README.md ("Claims around paused types").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_reads import DROPPED_FIELDS, PATIENT, _explain_totals
from benchserver import start_server
from wirecount import Record, WireCounter

TYPES = ("a", "b", "c", "d", "e")
DEV_BATCH = 100


def paused_doc(now: datetime, n: int) -> dict[str, Any]:
    """A pending activity of the paused type, of the shape the code writes."""
    return {"_id": uuid.uuid4(), "activity_type": "big", "payload": {"n": n}, "priority": 3,
            "status": "pending", "created_at": now - timedelta(seconds=3600 - n * 0.01),
            "retry_count": 0, "max_retries": 3, "timeout_seconds": 300,
            "retry_delay_seconds": 1, "metadata": {}}


def ahead_of_first_claimable(activities: Any) -> int:
    """Pending activities ahead, in claim order, of the first one not paused."""
    first = activities.find_one({"status": "pending", "activity_type": {"$ne": "big"}},
                                sort=[("priority", -1), ("created_at", 1)])
    if first is None:
        return activities.count_documents({"status": "pending"})
    return activities.count_documents({"status": "pending", "$or": [
        {"priority": {"$gt": first["priority"]}},
        {"priority": first["priority"], "created_at": {"$lt": first["created_at"]}}]})


def modelled(activities: Any, record: Record) -> tuple[int, int, int]:
    """(index seeks, keys, documents) one command of the new claim implies (see above)."""
    cmd = record.command
    if record.name == "find":
        nin = cmd["filter"]["activity_type"]["$nin"]
        found = activities.count_documents(cmd["filter"], limit=1)
        return len(nin) + 1, found, 0
    if record.name == "findAndModify":
        types = cmd["query"]["activity_type"]["$in"]
        heads = sum(1 for t in types if activities.count_documents(
            {"status": "pending", "activity_type": t}, limit=1))
        got = 1 if (record.reply.get("value") is not None) else 0
        return len(types), heads + got, got
    return 0, 0, 0


def explained(client: Any, record: Record) -> tuple[int, int]:
    if record.name not in ("find", "findAndModify") or not record.ok:
        return 0, 0
    command = {k: v for k, v in record.command.items() if k not in DROPPED_FIELDS}
    return _explain_totals(client[record.database].command(
        {"explain": command, "verbosity": "executionStats"}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paused", type=int, default=10_000)
    parser.add_argument("--claimable", type=int, default=10)
    parser.add_argument("--model", action="store_true", help="the model even on a real MongoDB")
    args = parser.parse_args()
    from pymongo import MongoClient, monitoring

    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.index_specs import index_name
    from runnerq_cli.backend.domain.specs import ActivitySpec
    from runnerq_cli.config import load_settings

    counter = WireCounter()
    monitoring.register(counter)
    uri, proc = start_server()
    real = proc is None and not args.model
    database = f"bench_paused_{uuid.uuid4().hex[:8]}"
    try:
        settings = load_settings(None, overrides={"uri": uri, "database": database,
                                                  "queue": "bench", **PATIENT},
                                 environ={"RUNNERQ_CONFIG": ""})
        rq = RunnerQ(settings)
        rq.maintenance.init_indexes()
        client: MongoClient[dict[str, Any]] = MongoClient(uri, uuidRepresentation="standard")
        activities = client[database][rq.context.activities.name]
        now = datetime.now(UTC)
        print(f"building: {args.paused:,} paused, {args.claimable} claimable ...",
              file=sys.stderr, flush=True)
        batch = DEV_BATCH if proc is not None else 5000
        for start in range(0, args.paused, batch):
            activities.insert_many([paused_doc(now, n) for n in
                                    range(start, min(args.paused, start + batch))])
        rq.enqueue_many([ActivitySpec(TYPES[n % len(TYPES)], {"n": n})
                         for n in range(args.claimable)])
        old_filter = {"status": "pending", "activity_type": {"$nin": ["big"]}}
        old_index = index_name(settings, "claim order")
        rows = []
        rq.dequeue("warm-up", exclude_types=["big"])  # the first look-ups
        counter.take()
        while True:
            if real:
                old = _explain_totals(activities.find(old_filter).sort(
                    [("priority", -1), ("created_at", 1)]).limit(1).hint(old_index).explain())
                old_keys, old_docs = old
            else:
                old_keys = old_docs = ahead_of_first_claimable(activities) + 1
            counter.take()  # the measuring above is not the claim's
            claims = rq.dequeue("bench", exclude_types=["big"])
            records = [r for r in counter.take() if r.name in ("find", "findAndModify")]
            if not claims:
                if rows:
                    rows[-1]["empty_commands"] = len(records)
                break
            seeks = keys = docs = 0
            for record in records:
                if real:
                    k, d = explained(client, record)
                else:
                    s, k, d = modelled(activities, record)
                    seeks += s
                keys, docs = keys + k, docs + d
            rows.append({"commands": len(records), "seeks": seeks, "keys": keys, "docs": docs,
                         "old_keys": old_keys, "old_docs": old_docs})
        how = "explain (executionStats)" if real else "what the query shapes imply (model)"
        print(f"server: {'real MongoDB' if real else 'dev server'}; figures: {how}")
        print(f"paused pending: {args.paused:,}; claims made: {len(rows) + 1} "
              "(the first, which found the types, left out)")
        if not rows:
            return
        for label, key in (("commands per claim", "commands"),
                           ("index seeks per claim (model)", "seeks"),
                           ("keys examined per claim", "keys"),
                           ("documents examined per claim", "docs"),
                           ("old claim ($nin): keys examined", "old_keys"),
                           ("old claim ($nin): documents examined", "old_docs")):
            values = [r[key] for r in rows]
            print(f"  {label:<40} median {statistics.median(values):>8g}  "
                  f"max {max(values):>8g}")
    finally:
        MongoClient(uri).drop_database(database)
        if proc is not None:
            proc.kill()


if __name__ == "__main__":
    main()

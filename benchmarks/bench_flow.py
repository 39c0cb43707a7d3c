"""What flow control costs (docs/design.md, "Flow control"): per activity, the plain
path and a limited one side by side, and the commands an idle fleet sends against a
saturated limit.

- plain: N activities of a type without a limit, enqueued, claimed and acknowledged one
  by one: commands, documents written and index entries changed per activity;
- limited: the same of a type limited to 3 at once and 1 per key, over 5 keys;
- saturated: W claimers (1, 5, 20; each with its own view of the limits, as worker
  processes have) asking for a type whose 3 slots are all held, for `--seconds`, each
  asking again after 50 ms when it got nothing (a worker's shortest idle wait): the
  commands per second the fleet sends.

    python benchmarks/bench_flow.py                 # on a dev server of its own
    RUNNERQ_BENCH_MONGO_URI=mongodb://localhost:27017 python benchmarks/bench_flow.py

Figures: benchmarks/README.md ("Flow control").
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchserver import start_server
from pymongo import MongoClient
from wirecount import IndexCatalog, WireCounter, tally

from runnerq_cli.backend.domain.flow import make_limits
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.ops.limits import FlowLimits
from runnerq_cli.backend.queue.maintenance import Maintenance
from runnerq_cli.backend.queue.queue import ActivityQueue
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.config import load_settings

KEYS = [f"k{i}" for i in range(5)]


def queue_on(client: MongoClient[dict[str, Any]], uri: str, database: str) -> ActivityQueue:
    settings = load_settings(None, overrides={"uri": uri, "database": database,
                                              "queue": "bench"}, environ={"RUNNERQ_CONFIG": ""})
    return ActivityQueue(QueueContext.create(settings, client[database]))


def per_activity(uri: str, n: int, limited: bool) -> dict[str, Any]:
    counter = WireCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, uuidRepresentation="standard", tz_aware=True, event_listeners=[counter])
    database = f"bench_flow_{uuid.uuid4().hex[:8]}"
    queue = queue_on(client, uri, database)
    ctx = queue._ctx
    Maintenance(ctx).init_indexes()
    if limited:
        FlowLimits(ctx, AuditLog(ctx)).set(make_limits("t", concurrency=3, key_limit=1))
    catalog = IndexCatalog(client)
    catalog.prime(database)
    queue.dequeue("w")  # the limits read (once per 5 s) before counting
    counter.take()
    for i in range(n):
        queue.enqueue(ActivitySpec("t", {"i": i}, key=KEYS[i % 5] if limited else None))
    enqueued = tally(counter.take(), catalog).per(n)
    for _ in range(n):
        [claim] = queue.dequeue("w", types=["t"])
        queue.ack_success(claim, None)
    ran = tally(counter.take(), catalog).per(n)
    client.drop_database(database)
    client.close()
    keep = ("commands", "commands_by_name", "documents_written", "documents_by_collection",
            "index_entries_changed")
    return {"limited": limited, "activities": n, "enqueue": {k: enqueued[k] for k in keep},
            "claim_and_ack": {k: ran[k] for k in keep}}


def saturated(uri: str, workers: int, seconds: float) -> dict[str, Any]:
    counter = WireCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, uuidRepresentation="standard", tz_aware=True, event_listeners=[counter])
    database = f"bench_flow_{uuid.uuid4().hex[:8]}"
    first = queue_on(client, uri, database)
    Maintenance(first._ctx).init_indexes()
    FlowLimits(first._ctx, AuditLog(first._ctx)).set(make_limits("t", concurrency=3))
    for i in range(20):
        first.enqueue(ActivitySpec("t", {"i": i}))
    held = first.dequeue("holder", types=["t"], limit=3, lease_seconds=600)
    assert len(held) == 3
    claimers = [queue_on(client, uri, database) for _ in range(workers)]
    stop = time.monotonic() + seconds
    got: list[int] = []

    def run(queue: ActivityQueue) -> None:
        while time.monotonic() < stop:
            got.append(len(queue.dequeue("w", types=["t"])))
            time.sleep(0.05)

    counter.take()
    threads = [threading.Thread(target=run, args=(q,)) for q in claimers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = counter.take()
    client.drop_database(database)
    client.close()
    assert sum(got) == 0, "a claim past the limit"
    return {"workers": workers, "seconds": seconds, "dequeue_calls": len(got),
            "commands_per_second": round(len(records) / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    uri, server = start_server()
    try:
        out = {"plain": per_activity(uri, args.activities, False),
               "limited": per_activity(uri, args.activities, True),
               "saturated": [saturated(uri, w, args.seconds) for w in (1, 5, 20)]}
    finally:
        if server is not None:
            server.kill()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

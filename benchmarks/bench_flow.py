"""What flow control costs (docs/design.md, "Flow control"): per activity, the plain
path and a limited one side by side, and the commands an idle fleet sends against a
saturated limit.

- plain: N activities of a type without a limit, enqueued, claimed and acknowledged one
  by one: commands, documents written and index entries changed per activity;
- limited: the same of a type limited to 3 at once and 1 per key, over 5 keys;
- saturated: W claimers (1, 5, 20; each with its own view of the limits, as worker
  processes have) asking for a type whose 3 slots are all held, for `--seconds`, each
  asking again after 50 ms when it got nothing (a worker's shortest idle wait): the
  commands per second the fleet sends;
- idle: one real worker (`Worker`, default poll interval, its heartbeats and chores
  included) idle for `--seconds` on a queue with nothing it may start, without limits and
  with its one type's limit full (held by another host): the commands per minute each
  sends, and the difference (what a full limit costs an idle worker that polls; with
  change streams an idle worker sends no claim until told, docs/design.md).

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


_IDLE_COUNTER: WireCounter | None = None


def idle(uri: str, seconds: float, limited: bool) -> dict[str, Any]:
    """Commands per minute of one idle worker: nothing pending it may start."""
    from pymongo import monitoring

    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.worker.engine import Worker
    from runnerq_cli.worker.handlers import HandlerRegistry

    global _IDLE_COUNTER
    if _IDLE_COUNTER is None:  # before the worker's client is made (clients are shared)
        _IDLE_COUNTER = WireCounter()
        monitoring.register(_IDLE_COUNTER)
    counter = _IDLE_COUNTER
    database = f"bench_flow_{uuid.uuid4().hex[:8]}"
    settings = load_settings(None, overrides={"uri": uri, "database": database,
                                              "queue": "bench"}, environ={"RUNNERQ_CONFIG": ""})
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    if limited:
        rq.limits.set(make_limits("t", concurrency=3))
        for i in range(20):
            rq.enqueue(ActivitySpec("t", {"i": i}))
        assert len(rq.dequeue("other-host", types=["t"], limit=3, lease_seconds=600)) == 3
    handlers = HandlerRegistry()
    handlers.handler("t")(lambda payload: None)
    worker = Worker(rq, handlers, types=["t"])
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    time.sleep(3)  # past start-up (registration, indexes, the first chores)
    counter.take()
    time.sleep(seconds)
    records = [r for r in counter.take() if r.database == database]
    worker.stop()
    thread.join(30)
    MongoClient(uri).drop_database(database)
    by_name: dict[str, float] = {}
    for r in records:
        by_name[r.name] = by_name.get(r.name, 0) + 60 / seconds
    return {"limited": limited, "seconds": seconds,
            "commands_per_minute": round(len(records) * 60 / seconds, 1),
            "by_name": {k: round(v, 1) for k, v in sorted(by_name.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    uri, server = start_server()
    try:
        out = {"plain": per_activity(uri, args.activities, False),
               "limited": per_activity(uri, args.activities, True),
               "saturated": [saturated(uri, w, args.seconds) for w in (1, 5, 20)],
               "idle": [idle(uri, args.idle_seconds, limited) for limited in (False, True)]}
    finally:
        if server is not None:
            server.kill()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

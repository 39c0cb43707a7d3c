"""What firing schedules costs the server (docs/design.md, "Schedules"; issue 30, point 8).

- **Per fire, with 1, 5 and 20 workers**: the worst case, every worker's firing chore
  running at the same instant on a due schedule (each worker its own client, all
  released together by a barrier), FIRES times over; the commands and documents written
  by all of them together, per fire. (The chore is shared over the fleet, so workers
  rarely race at all: this is the bound.)
- **Per idle hour with 1,000 schedules**: none due; the chore's query, TICKS times,
  scaled to an hour of one chore a second fleet-wide (the chore's interval is the poll
  interval, 1 s, shared over the live workers).

Commands are counted on the wire (pymongo's command monitoring, wirecount.py).

    python benchmarks/bench_schedules.py [FIRES] [TICKS]     (default 20 and 50)

Against RUNNERQ_BENCH_MONGO_URI, else a dev server in its own process.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchserver import start_server  # noqa: E402
from pymongo import MongoClient  # noqa: E402
from wirecount import IndexCatalog, Record, WireCounter, tally  # noqa: E402

from runnerq_cli.backend.domain.schedules import ScheduleDef, Template  # noqa: E402
from runnerq_cli.backend.ops.audit import AuditLog  # noqa: E402
from runnerq_cli.backend.ops.schedules import Schedules  # noqa: E402
from runnerq_cli.backend.queue.maintenance import Maintenance  # noqa: E402
from runnerq_cli.backend.queue.queue import ActivityQueue  # noqa: E402
from runnerq_cli.backend.store.context import QueueContext  # noqa: E402
from runnerq_cli.config import load_settings  # noqa: E402

START = datetime(2027, 1, 4, 12, 0, tzinfo=UTC)


class Clock:
    """The fleet's shared clock (moved by the benchmark: a fire each minute)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def firer(uri: str, database: str, clock: Clock) -> tuple[Schedules, WireCounter, Any]:
    """One worker's firing part on its own counted client."""
    counter = WireCounter()
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, uuidRepresentation="standard", tz_aware=True, event_listeners=[counter])
    settings = load_settings(None, overrides={"uri": uri, "database": database,
                                              "queue": "bench"}, environ={"RUNNERQ_CONFIG": ""})
    ctx = QueueContext.create(settings, client[database], clock=clock)
    return Schedules(ctx, ActivityQueue(ctx), AuditLog(ctx)), counter, client


def per_fire(uri: str, workers: int, fires: int) -> dict[str, Any]:
    database = f"bench_sched_{uuid.uuid4().hex[:8]}"
    clock = Clock()
    parts = [firer(uri, database, clock) for _ in range(workers)]
    first = parts[0][0]
    Maintenance(first._ctx).init_indexes()
    first.add(ScheduleDef("tick", Template("tick"), cron="* * * * *"))
    for _, counter, _ in parts:
        counter.take()
    records: list[Record] = []
    fired = 0
    for _ in range(fires):
        clock.now += timedelta(minutes=1)
        barrier = threading.Barrier(workers)
        results: list[dict[str, int]] = []

        def run(part: Schedules, barrier: threading.Barrier = barrier,
                results: list[dict[str, int]] = results) -> None:
            barrier.wait()
            results.append(part.fire_due())

        threads = [threading.Thread(target=run, args=(p,)) for p, _, _ in parts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fired += sum(r["fired"] for r in results)
    for _, counter, _ in parts:
        records += counter.take()
    catalog = IndexCatalog(parts[0][2])
    catalog.prime(database)
    activities = parts[0][2][database]["runnerq_bench_activities"].count_documents({})
    out = tally(records, catalog).per(fires)
    parts[0][2].drop_database(database)
    for _, _, client in parts:
        client.close()
    assert activities == fires, (activities, fires)  # one activity per fire, racing or not
    return {"workers": workers, "fires": fires, "activities": activities,
            **{k: out[k] for k in ("commands", "commands_by_name", "documents_written",
                                   "documents_by_collection", "index_entries_changed")}}


def idle_hour(uri: str, schedules: int, ticks: int) -> dict[str, Any]:
    database = f"bench_sched_{uuid.uuid4().hex[:8]}"
    clock = Clock()
    part, counter, client = firer(uri, database, clock)
    Maintenance(part._ctx).init_indexes()
    coll = client[database]["runnerq_bench_schedules"]
    template = ScheduleDef("s", Template("tick"), cron="0 3 * * *")
    from runnerq_cli.backend.domain.schedules import new_document

    docs = [new_document(ScheduleDef(f"s{n:04d}", template.activity, cron="0 3 * * *"),
                         created_at=START, next_fire_at=START + timedelta(hours=15))
            for n in range(schedules)]
    for start in range(0, len(docs), 500):
        coll.insert_many(docs[start:start + 500])
    counter.take()
    for _ in range(ticks):
        clock.now += timedelta(seconds=1)
        assert part.fire_due()["fired"] == 0
    records = counter.take()
    catalog = IndexCatalog(client)
    catalog.prime(database)
    out = tally(records, catalog).per(ticks)
    client.drop_database(database)
    client.close()
    hour = 3600  # chore ticks an hour, fleet-wide (one a second, shared by the workers)
    return {"schedules": schedules, "ticks_measured": ticks,
            "per_tick": {k: out[k] for k in ("commands", "commands_by_name",
                                             "documents_written", "bytes_total")},
            "per_idle_hour": {"commands": round(out["commands"] * hour),
                              "documents_written": round(out["documents_written"] * hour),
                              "bytes": round(out["bytes_total"] * hour)}}


def main() -> None:
    fires = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    ticks = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    uri, server = start_server()
    try:
        report = {"per_fire": [per_fire(uri, n, fires) for n in (1, 5, 20)],
                  "idle": idle_hour(uri, 1000, ticks)}
    finally:
        if server is not None:
            server.kill()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

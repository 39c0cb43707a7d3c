"""Benchmark: the worker against a raw pymongo claim/complete loop, same server, same run.

    python benchmarks/bench_worker.py [-n 300] [--concurrency 4]

Server: RUNNERQ_BENCH_MONGO_URI, else a mongoeco server started in a separate
process (so its CPU is not counted as client CPU). Reports, per activity:
MongoDB commands over the whole life enqueue → claim → complete with result
and events (pymongo command monitoring), client CPU seconds, and throughput
(claim → complete phase) of the worker over the raw loop. Writes JSON to
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from pymongo import MongoClient, ReturnDocument, monitoring


class Counter(monitoring.CommandListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        # Round-trip milliseconds per command name: where the server's time goes.
        self.millis: collections.Counter[str] = collections.Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("hello", "ismaster", "isMaster", "ping", "endSessions"):
            return
        with self.lock:
            self.counts[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        with self.lock:
            self.millis[event.command_name] += event.duration_micros / 1000

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def reset(self) -> collections.Counter[str]:
        with self.lock:
            out, self.counts = self.counts, collections.Counter()
            self.millis = collections.Counter()
        return out

    def round_trip_ms(self) -> dict[str, float]:
        with self.lock:
            return {name: round(ms, 1) for name, ms in self.millis.most_common()}


COUNTER = Counter()
monitoring.register(COUNTER)  # before any client exists


def start_server() -> tuple[str, subprocess.Popen[str] | None]:
    uri = os.environ.get("RUNNERQ_BENCH_MONGO_URI")
    if uri:
        return uri, None
    code = ("import time\nfrom runnerq_cli.devserver import start_in_thread\n"
            "s = start_in_thread()\nprint(s.uri, flush=True)\ntime.sleep(10**9)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc.stdout.readline().strip(), proc


def cpu() -> float:
    return time.process_time()


def bench_worker(uri: str, n: int, concurrency: int) -> dict[str, object]:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.queue import ActivitySpec
    from runnerq_cli.config import load_settings
    from runnerq_cli.worker.engine import Worker
    from runnerq_cli.worker.handlers import HandlerRegistry
    from runnerq_cli.worker.logs import WorkerLog

    db = f"bench_worker_{uuid.uuid4().hex[:8]}"
    settings = load_settings(None, overrides={"uri": uri, "database": db, "queue": "bench"},
                             environ={"RUNNERQ_CONFIG": ""})
    backend = RunnerQ(settings)
    backend.init_indexes()
    registry = HandlerRegistry()
    registry.add("noop", lambda payload, ctx: None)
    COUNTER.reset()
    cpu0, t0 = cpu(), time.perf_counter()
    backend.enqueue_many([ActivitySpec("noop", {"i": i}) for i in range(n)])
    enqueue_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    worker = Worker(backend, registry, burst=True, concurrency=concurrency,
                    log=WorkerLog("plain", "warning", stream=io.StringIO()))
    code = worker.run(install_signals=False)
    run_s = time.perf_counter() - t1
    used_cpu = cpu() - cpu0
    round_trips = COUNTER.round_trip_ms()
    commands = COUNTER.reset()
    names = backend.collections.names
    check = {
        "completed": backend.db[names.activities].count_documents({"status": "completed"}),
        "results": backend.db[names.results].count_documents({}),
        "events": backend.db[names.events].count_documents({}),
        "outboxes_left": backend.db[names.activities].count_documents(
            {"outbox": {"$exists": True}}),
    }
    backend.db.client.drop_database(db)
    assert code == 0 and check["completed"] == n and check["results"] == n, check
    total = sum(commands.values())
    return {"n": n, "seconds": run_s, "enqueue_seconds": enqueue_s,
            "activities_per_second": n / run_s, "commands": dict(commands),
            "round_trip_ms": round_trips,
            "commands_per_activity": total / n, "cpu_seconds_per_activity": used_cpu / n,
            "check": check}


def bench_raw(uri: str, n: int) -> dict[str, object]:
    client = MongoClient(uri, uuidRepresentation="standard", tz_aware=True)
    db = client[f"bench_raw_{uuid.uuid4().hex[:8]}"]
    col = db.activities
    col.create_index([("status", 1), ("priority", -1), ("created_at", 1)])
    COUNTER.reset()
    cpu0 = cpu()
    now = datetime.now(UTC)
    col.insert_many([{"_id": uuid.uuid4(), "activity_type": "noop", "payload": {"i": i},
                      "priority": 2, "status": "pending", "created_at": now, "retry_count": 0}
                     for i in range(n)])
    t1 = time.perf_counter()
    done = 0
    while True:
        doc = col.find_one_and_update(
            {"status": "pending"},
            {"$set": {"status": "processing", "lease_id": uuid.uuid4().hex,
                      "started_at": datetime.now(UTC)}},
            sort=[("priority", -1), ("created_at", 1)], return_document=ReturnDocument.AFTER)
        if doc is None:
            break
        col.update_one({"_id": doc["_id"], "lease_id": doc["lease_id"]},
                       {"$set": {"status": "completed", "completed_at": datetime.now(UTC),
                                 "result": None}})
        done += 1
    run_s = time.perf_counter() - t1
    used_cpu = cpu() - cpu0
    round_trips = COUNTER.round_trip_ms()
    commands = COUNTER.reset()
    client.drop_database(db.name)
    client.close()
    assert done == n
    return {"n": n, "seconds": run_s, "activities_per_second": n / run_s,
            "commands": dict(commands), "commands_per_activity": sum(commands.values()) / n,
            "round_trip_ms": round_trips,
            "cpu_seconds_per_activity": used_cpu / n,
            "note": "no events, no result collection, no lease renewal, no retries"}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("-n", type=int, default=300, help="activities per phase")
    parser.add_argument("--concurrency", type=int, default=4, help="worker concurrency")
    args = parser.parse_args()
    uri, proc = start_server()
    try:
        raw = bench_raw(uri, args.n)
        worker = bench_worker(uri, args.n, args.concurrency)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    server = "RUNNERQ_BENCH_MONGO_URI" if proc is None else "mongoeco (separate process)"
    ratio = worker["activities_per_second"] / raw["activities_per_second"]
    rows = [("", "worker", "raw loop"),
            ("activities/s", f"{worker['activities_per_second']:.1f}",
             f"{raw['activities_per_second']:.1f}"),
            ("commands/activity", f"{worker['commands_per_activity']:.3f}",
             f"{raw['commands_per_activity']:.3f}"),
            ("client CPU ms/activity", f"{worker['cpu_seconds_per_activity'] * 1000:.3f}",
             f"{raw['cpu_seconds_per_activity'] * 1000:.3f}")]
    print(f"server: {server}; n={args.n}; worker concurrency={args.concurrency}")
    for row in rows:
        print(f"{row[0]:<24}{row[1]:>12}{row[2]:>12}")
    print(f"throughput ratio worker/raw: {ratio:.2f}")
    print(f"worker commands: {worker['commands']}")
    print(f"raw commands: {raw['commands']}")
    print(f"worker round-trip ms by command: {worker['round_trip_ms']}")
    print(f"raw round-trip ms by command: {raw['round_trip_ms']}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    path = out / f"bench_worker_{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"server": server, "concurrency": args.concurrency,
                                "worker": worker, "raw": raw, "ratio": ratio}, indent=2))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Idle workers and tails: what waiting costs, polling against change streams.

Issue 32. Two measurements on one server (RUNNERQ_BENCH_MONGO_URI, else a dev server in
its own process, which has no change streams: the polling figures):

1. **Idle workers**: `--workers` workers (default poll interval, 1 s) wait on an empty
   queue for `--idle` seconds; the claims they send (findAndModify, counted with a
   pymongo CommandListener) give claims per idle worker per minute. Then `--n`
   activities are enqueued one at a time, 1.5-2.5 s apart (so each finds the workers
   idle, their polling back-off at its longest); enqueue-to-start latency is from
   `enqueue` returning to the handler starting (one process, one clock): p50 and max.
2. **A tail under steady load**: a producer enqueues `--rate` activities/s for `--load`
   seconds while one worker runs them and a tail (`event_stream`, mode auto) follows;
   the commands the tail's reading thread sends (finds, aggregates, `hello`), and the
   change stream's own getMores apart, per event delivered.

    python benchmarks/bench_wake.py                                   # dev server: polling
    RUNNERQ_BENCH_MONGO_URI=mongodb://127.0.0.1:27017/?directConnection=true \\
        python benchmarks/bench_wake.py                               # a replica set: streams

Figures: benchmarks/README.md ("Idle workers and tails").
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchserver import start_server
from pymongo import monitoring

TAIL_THREAD = "bench-tail"


class ThreadCounter(monitoring.CommandListener):
    """Commands by the name of the thread that sent them (published in that thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_thread: dict[tuple[str, str], int] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        key = (threading.current_thread().name, event.command_name)
        with self.lock:
            self.by_thread[key] = self.by_thread.get(key, 0) + 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> dict[tuple[str, str], int]:
        with self.lock:
            out, self.by_thread = self.by_thread, {}
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--idle", type=float, default=20.0, help="idle seconds measured")
    parser.add_argument("-n", type=int, default=15, help="activities timed one by one")
    parser.add_argument("--rate", type=float, default=4.0, help="activities/s of the load")
    parser.add_argument("--load", type=float, default=20.0, help="seconds of steady load")
    args = parser.parse_args()

    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.config import load_settings
    from runnerq_cli.worker.engine import Worker
    from runnerq_cli.worker.handlers import HandlerRegistry

    counter = ThreadCounter()
    monitoring.register(counter)
    uri, proc = start_server()
    database = f"bench_wake_{uuid.uuid4().hex[:8]}"
    started: dict[str, float] = {}
    registry = HandlerRegistry()

    @registry.handler("job")
    def job(payload: dict[str, Any]) -> None:
        started.setdefault(str(payload["key"]), time.monotonic())

    workers: list[Worker] = []
    try:
        settings = load_settings(None, overrides={
            "uri": uri, "database": database, "queue": "bench",
            "server_selection_timeout": "120s", "connect_timeout": "120s"},
            environ={"RUNNERQ_CONFIG": ""})
        rq = RunnerQ(settings)
        rq.maintenance.init_indexes()
        probe = rq.watch_claimable((), lambda: None)
        mode = "change-stream" if probe.open() else "poll"
        probe.close()
        print(f"server: {'dev server' if proc else uri.split('@')[-1]}; idle workers wait "
              f"by: {mode}", flush=True)

        # 1. idle workers
        for _ in range(args.workers):
            worker = Worker(RunnerQ(settings), registry, burst=False, types=["job"])
            worker.start()
            workers.append(worker)
        for worker in workers:
            worker.running.wait(60)
        time.sleep(3)  # past start-up (registration, first claims, streams opening)
        counter.take()
        time.sleep(args.idle)
        idle = counter.take()
        claims = sum(n for (_t, name), n in idle.items() if name == "findAndModify")
        per_minute = claims / args.workers / (args.idle / 60)
        print(f"idle: {claims} claims by {args.workers} workers in {args.idle:g} s: "
              f"{per_minute:.2f} claims per idle worker per minute", flush=True)
        latencies = []
        for n in range(args.n):
            key = f"one-{n}"
            rq.enqueue("job", {"key": key})
            sent = time.monotonic()
            deadline = sent + 30
            while key not in started and time.monotonic() < deadline:
                time.sleep(0.001)
            latencies.append((started.get(key, deadline) - sent) * 1000)
            time.sleep(random.uniform(1.5, 2.5))
        print(f"enqueue to start on an idle worker ({args.n}): p50 "
              f"{statistics.median(latencies):.0f} ms, max {max(latencies):.0f} ms", flush=True)
        for worker in workers[1:]:
            worker.stop()
        for worker in workers[1:]:
            worker.join(30)
        workers = workers[:1]

        # 2. a tail under steady load
        tail_backend = RunnerQ(settings)
        stream = tail_backend.event_stream(mode="auto", poll_interval=0.5)
        delivered = [0]

        def follow() -> None:
            for _event in stream:
                delivered[0] += 1

        tail = threading.Thread(target=follow, name=TAIL_THREAD, daemon=True)
        tail.start()
        time.sleep(2)
        counter.take()
        first = delivered[0]
        end = time.monotonic() + args.load
        while time.monotonic() < end:
            rq.enqueue("job", {"key": uuid.uuid4().hex})
            time.sleep(1 / args.rate)
        time.sleep(3)  # the last ones run and are read
        stream.stop()
        sent = counter.take()
        events = delivered[0] - first
        reads = sum(n for (thread, name), n in sent.items() if thread == TAIL_THREAD)
        stream_gets = sum(n for (thread, name), n in sent.items()
                          if thread == "runnerq-tail" and name == "getMore")
        print(f"tail ({stream.mode}) under {args.rate:g} activities/s for {args.load:g} s: "
              f"{events} events, {reads} commands by its reader "
              f"({reads / max(events, 1):.2f} per event; "
              f"{getattr(stream, 'reads', 0)} wake-ups read), "
              f"{stream_gets} change-stream getMores", flush=True)
        by_kind: dict[str, int] = {}
        for (thread, name), n in sent.items():
            if thread == TAIL_THREAD:
                by_kind[name] = by_kind.get(name, 0) + n
        print("  reader's commands: " + ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
    finally:
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.join(30)
        from pymongo import MongoClient

        MongoClient(uri).drop_database(database)
        if proc is not None:
            proc.kill()


if __name__ == "__main__":
    main()

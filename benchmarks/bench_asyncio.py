"""What the asyncio API costs per call against the sync API it runs (runnerq_cli.aio).

`AsyncRunnerQ` runs each sync method on a thread pool (aio/queue.py): the same
commands reach the server, so the cost to compare is the client's, per call:
CPU (this process's, the server runs in its own) and latency, for the same calls
side by side in one run, alternating sync and async rounds:

- `enqueue`: one activity, awaited one after another;
- `get_activity`: one indexed read by `_id`;
- `wait` on a finished activity: two reads (the activity, its result);
- `stats`: one aggregation.

A last phase awaits `get_activity` from CONCURRENT tasks at once (`asyncio.gather`)
against the same number of sync threads, to show the pool's bound at work.

    python benchmarks/bench_asyncio.py                 # a dev server in its own process
    python benchmarks/bench_asyncio.py -n 200 --rounds 9
    RUNNERQ_BENCH_MONGO_URI=mongodb://localhost:27017 python benchmarks/bench_asyncio.py

Figures: benchmarks/README.md, "The asyncio API".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchserver import start_server

from runnerq_cli.aio import AsyncRunnerQ
from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.config import load_settings

CONCURRENT = 8


def _measure(run: Callable[[], None], calls: int) -> tuple[float, float]:
    """(client CPU µs per call, wall µs per call) of `run`, which makes `calls` calls."""
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return ((time.process_time() - cpu) / calls * 1e6,
            (time.perf_counter() - wall) / calls * 1e6)


def _sync_loop(fn: Callable[[int], Any], n: int) -> Callable[[], None]:
    def run() -> None:
        for i in range(n):
            fn(i)
    return run


def _async_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[int], Awaitable[Any]],
                n: int) -> Callable[[], None]:
    async def body() -> None:
        for i in range(n):
            await fn(i)
    return lambda: loop.run_until_complete(body())


def _sync_threads(fn: Callable[[int], Any], n: int) -> Callable[[], None]:
    def run() -> None:
        per = n // CONCURRENT
        threads = [threading.Thread(target=lambda: [fn(i) for i in range(per)])
                   for _ in range(CONCURRENT)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return run


def _async_gather(loop: asyncio.AbstractEventLoop, fn: Callable[[int], Awaitable[Any]],
                  n: int) -> Callable[[], None]:
    async def task() -> None:
        for i in range(n // CONCURRENT):
            await fn(i)

    async def body() -> None:
        await asyncio.gather(*(task() for _ in range(CONCURRENT)))
    return lambda: loop.run_until_complete(body())


def _raw_pymongo(uri: str, database: str, loop: asyncio.AbstractEventLoop, ids: list[Any],
                 n: int, closers: list[Callable[[], Any]],
                 ) -> tuple[Callable[[], None], Callable[[], None], int] | None:
    """The other way: pymongo's MongoClient against its AsyncMongoClient, one find_one by
    `_id` each (what `get_activity` sends, without our rules), or None without it."""
    try:
        from pymongo import AsyncMongoClient, MongoClient
    except ImportError:  # pymongo before 4.9
        return None
    options: dict[str, Any] = {"uuidRepresentation": "standard"}
    sync_coll = MongoClient(uri, **options)[database]["runnerq_bench_activities"]
    async_client: Any = AsyncMongoClient(uri, **options)
    async_coll = async_client[database]["runnerq_bench_activities"]
    sync_coll.find_one({"_id": ids[0]})
    loop.run_until_complete(async_coll.find_one({"_id": ids[0]}))
    closers.append(lambda: loop.run_until_complete(async_client.close()))
    return (_sync_loop(lambda i: sync_coll.find_one({"_id": ids[i]}), n),
            _async_loop(loop, lambda i: async_coll.find_one({"_id": ids[i]}), n), n)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("-n", type=int, default=100, help="calls per phase and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians reported)")
    args = parser.parse_args()
    uri, server = start_server()
    try:
        settings = load_settings(None, overrides={
            "uri": uri, "database": f"bench_aio_{uuid.uuid4().hex[:8]}", "queue": "bench",
            "connect_timeout": 30.0, "server_selection_timeout": 30.0},
            environ={"RUNNERQ_CONFIG": ""})
        rq = RunnerQ(settings)
        rq.maintenance.init_indexes()
        aq = AsyncRunnerQ(rq)
        loop = asyncio.new_event_loop()
        n = args.n
        done = rq.enqueue("bench", {"done": True}).activity_id
        [claim] = rq.dequeue("bench-worker", limit=1)
        rq.ack_success(claim, {"ok": True})
        ids = [r.activity_id for r in rq.enqueue_many(
            [__import__("runnerq_cli").ActivitySpec("bench", {"i": i}) for i in range(n)])
            if not isinstance(r, Exception)]
        loop.run_until_complete(aq.ping())  # the pool's threads and connections warm
        rq.ping()
        phases: dict[str, tuple[Callable[[], None], Callable[[], None], int]] = {
            "enqueue": (_sync_loop(lambda i: rq.enqueue("bench", {"i": i}), n),
                        _async_loop(loop, lambda i: aq.enqueue("bench", {"i": i}), n), n),
            "get_activity": (_sync_loop(lambda i: rq.get_activity(ids[i]), n),
                             _async_loop(loop, lambda i: aq.get_activity(ids[i]), n), n),
            "wait (finished)": (_sync_loop(lambda i: rq.wait(done, timeout=0), n),
                                _async_loop(loop, lambda i: aq.wait(done, timeout=0), n), n),
            "stats": (_sync_loop(lambda i: rq.stats(), n // 4),
                      _async_loop(loop, lambda i: aq.stats(), n // 4), n // 4),
            f"get_activity, {CONCURRENT} at once": (
                _sync_threads(lambda i: rq.get_activity(ids[i]), n),
                _async_gather(loop, lambda i: aq.get_activity(ids[i]), n),
                n // CONCURRENT * CONCURRENT),
        }
        closers: list[Callable[[], Any]] = []
        raw = _raw_pymongo(uri, settings.database, loop, ids, n, closers)
        if raw is not None:
            phases["pymongo find_one by _id"] = raw
        print(f"{n} calls per phase, {args.rounds} rounds; medians; ratio = async / sync "
              "(median of the rounds' ratios, [min-max])")
        print(f"{'phase':<26} {'sync CPU µs':>11} {'async CPU µs':>12} {'CPU ratio':>18} "
              f"{'sync µs':>9} {'async µs':>9} {'latency ratio':>18}")
        for name, (sync_run, async_run, calls) in phases.items():
            rows: list[tuple[float, float, float, float]] = []
            for round_ in range(args.rounds):
                order = [sync_run, async_run] if round_ % 2 == 0 else [async_run, sync_run]
                measured = {id(r): _measure(r, calls) for r in order}
                rows.append((*measured[id(sync_run)], *measured[id(async_run)]))
            cpu_ratios = [a / s for s, _, a, _ in rows]
            wall_ratios = [a / s for _, s, _, a in rows]

            def med(k: int, rows: list[tuple[float, float, float, float]] = rows) -> float:
                return statistics.median(r[k] for r in rows)

            print(f"{name:<26} {med(0):>11.0f} {med(2):>12.0f} "
                  f"{statistics.median(cpu_ratios):>6.2f} [{min(cpu_ratios):.2f}-"
                  f"{max(cpu_ratios):.2f}] {med(1):>9.0f} {med(3):>9.0f} "
                  f"{statistics.median(wall_ratios):>6.2f} [{min(wall_ratios):.2f}-"
                  f"{max(wall_ratios):.2f}]")
        loop.run_until_complete(aq.close())
        for close in closers:
            close()
        loop.close()
    finally:
        if server is not None:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())

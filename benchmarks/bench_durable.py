"""What durable activities cost the server, beside the plain path, in one run.

Per unit: documents written, index entries changed, bytes sent and received and commands
(counted from the wire by wirecount.py: what a real MongoDB pays for, whatever its speed),
for a plain activity (enqueue, claim, success: unchanged by durable activities), a step
(its checkpoint), a sleep (park, the scheduler's wake, the claim again), a signal to a
waiting activity, a child (spawn, claim, success with its wake, the parent's park), and a
parent awaiting 100 children (spawn each, park on each unfinished one as an SDK's
wait_all does, every child's success waking it).

    python benchmarks/bench_durable.py                 # a dev server in its own process
    RUNNERQ_BENCH_MONGO_URI=mongodb://localhost:27017 python benchmarks/bench_durable.py
    python benchmarks/bench_durable.py --runs 3 -n 50  # the spread of several runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pymongo import monitoring

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchserver import start_server
from wirecount import IndexCatalog, WireCounter, tally

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.store.connection import client_for
from runnerq_cli.config import load_settings

COUNTER = WireCounter()
monitoring.register(COUNTER)  # before any client exists
FAR = datetime(2099, 1, 1, tzinfo=UTC)
FIGURES = ("documents_written", "index_entries_changed", "bytes_total", "commands")


def claim(rq: RunnerQ, activity_type: str) -> Any:
    [held] = rq.dequeue("bench", types=[activity_type], limit=1)
    return held


def plain(rq: RunnerQ) -> None:
    rq.enqueue("plain", {"n": 1})
    rq.ack_success(claim(rq, "plain"), {"ok": True})


def prepared(rq: RunnerQ, activity_type: str) -> Any:
    rq.enqueue(activity_type, {"n": 1})
    return claim(rq, activity_type)


def measure(rq: RunnerQ, catalog: IndexCatalog, units: int,
            setup: Callable[[], Any], unit: Callable[[Any], None]) -> dict[str, float]:
    """Per-unit figures of `unit`, each given what `setup` made (setup not counted)."""
    made = [setup() for _ in range(units)]
    COUNTER.take()
    for item in made:
        unit(item)
    rq.flush_outbox()
    out = tally(COUNTER.take(), catalog).per(units)
    return {k: out[k] for k in FIGURES}


def run_once(uri: str, n: int) -> dict[str, dict[str, float]]:
    settings = load_settings(None, overrides={"uri": uri, "database": f"bd_{uuid.uuid4().hex[:8]}",
                                              "queue": "bench", "connect_timeout": 30.0},
                             environ={"RUNNERQ_CONFIG": ""})
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    catalog = IndexCatalog(client_for(settings))
    catalog.prime(settings.database)
    rows: dict[str, dict[str, float]] = {}
    rows["plain activity (enqueue, claim, success)"] = measure(
        rq, catalog, n, lambda: None, lambda _: plain(rq))

    def step(held: Any) -> None:
        rq.durable.checkpoint(held, checkpoint_id(held.activity_id, "run", "s"), "Ok",
                              {"v": 1}, "run:s")
    rows["step (one checkpoint)"] = measure(rq, catalog, n, lambda: prepared(rq, "step"),
                                            step)

    def sleep(held: Any) -> None:
        rq.durable.park(held, "sleep", "sleep:s", rq.now())
        rq.process_scheduled()
        claim(rq, "sleep")
    rows["sleep (park, wake when due, claim again)"] = measure(
        rq, catalog, n, lambda: prepared(rq, "sleep"), sleep)

    def parked_on_signal() -> Any:
        held = prepared(rq, "signalled")
        rq.durable.park(held, "signal", "signal:go", FAR,
                        result_id=checkpoint_id(held.activity_id, "signal", "go"))
        rq.flush_outbox()
        return held
    rows["signal (to a waiting activity, waking it)"] = measure(
        rq, catalog, n, parked_on_signal,
        lambda held: rq.durable.signal(held.activity_id, "go", {"ok": True}))

    def child(parent: Any) -> None:
        kid = rq.durable.spawn(parent, ActivitySpec("child", {"n": 1})).activity_id
        rq.durable.park(parent, "await", "child", FAR, result_id=kid, producer=kid)
        rq.ack_success(claim(rq, "child"), {"ok": True})
    rows["child (spawn, park, child's run and success, wake)"] = measure(
        rq, catalog, n, lambda: prepared(rq, "parent"), child)

    def fan_out(parent: Any) -> None:
        kids = [rq.durable.spawn(parent, ActivitySpec("kid", {"i": i})).activity_id
                for i in range(100)]
        held = parent
        for kid in kids:  # wait_all: park on the first unfinished child, again after a wake
            rq.durable.park(held, "await", "all", FAR, result_id=kid, producer=kid)
            rq.ack_success(claim(rq, "kid"), {"ok": True})
            held = claim(rq, "fan")
        rq.ack_success(held, [True] * 100)
    rows["a parent awaiting 100 children (per parent)"] = measure(
        rq, catalog, 1, lambda: prepared(rq, "fan"), fan_out)
    client_for(settings).drop_database(settings.database)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("-n", type=int, default=30, help="units per row")
    parser.add_argument("--runs", type=int, default=3, help="runs, for the spread")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    uri, proc = start_server()
    try:
        runs = [run_once(uri, args.n) for _ in range(args.runs)]
    finally:
        if proc is not None:
            proc.terminate()
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    print(f"per unit, median of {args.runs} runs [min-max]; n={args.n}")
    print(f"{'':52} {'documents':>16} {'index entries':>16} {'bytes':>20} {'commands':>14}")
    for row in runs[0]:
        cells = []
        for figure in FIGURES:
            values = [run[row][figure] for run in runs]
            cells.append(f"{statistics.median(values):g} [{min(values):g}-{max(values):g}]")
        print(f"{row:52} {cells[0]:>16} {cells[1]:>16} {cells[2]:>20} {cells[3]:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

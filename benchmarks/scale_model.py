"""Scale on paper (issue 32): activities per second against partitions, shards and workers.

No machine here runs a sharded cluster at load, so this script computes what the
measured per-activity costs (benchmarks/README.md, "What one activity costs the
server") allow on hardware described by stated assumptions, and where the next limit
is: the oplog, the events collection, the worker registry, the chores. docs/scale.md
shows its table and explains each number; tests/test_scale_model.py checks that the
table there is what this script prints.

    python benchmarks/scale_model.py                      # the table of docs/scale.md
    python benchmarks/scale_model.py --doc-writes 40000   # another primary
    python benchmarks/scale_model.py --json

The model (docs/scale.md, "The model"): a primary sustains `doc_writes` document
writes and `index_writes` index-entry writes per second; an activity costs each
shard its share of the documents and index entries it writes (activities by
partition, results hashed by `_id`), the worker registry's heartbeats load the
database's primary shard; a worker process sustains 1000 / `client_cpu_ms` activities
per second (a no-op handler: the client CPU measured per activity). The rate is the
smallest of these bounds, and the binding one is named.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Costs:
    """What one successful activity costs the server (benchmarks/README.md, 2026-12-01,
    `bench_worker.py -n 300 --rounds 9`, default settings, success path)."""

    activity_docs: float = 3.0      # documents written in the activities collection
    result_docs: float = 1.0        # ... in the results collection
    activity_index: float = 10.0    # index entries changed in activities
    result_index: float = 2.0       # ... in results (_id and the TTL index)
    bytes: float = 2056.0           # sent + received
    commands: float = 1.42          # per activity, maintenance included
    client_cpu_ms: float = 1.98     # a worker process's CPU per activity (a no-op handler)
    # A partitioned queue: each pending activity has four pending index entries instead of
    # two (docs/design.md, "Indexes of a partitioned queue"): entering and leaving them.
    partition_index: float = 2.0
    # Oplog bytes per activity: assumed equal to the bytes the client sends (1634 of the
    # 2056): an insert's entry holds the document, an update's its diff, both smaller
    # than the command that carried them; an upper bound.
    oplog_bytes: float = 1634.0
    # A failed attempt (retry path): 5.03 documents, of which 3 events (Retrying and the
    # attempt's materialized Dequeued/Started), about 300 bytes each as stored.
    events_per_failure: float = 3.0
    event_bytes: float = 300.0


@dataclass(frozen=True)
class Assumptions:
    """What this script cannot measure here (docs/scale.md, "Assumptions", says where
    each comes from)."""

    doc_writes: float = 20_000.0    # document writes/s one primary sustains
    index_writes: float = 80_000.0  # index-entry writes/s one primary sustains
    oplog_gb: float = 50.0          # oplog size per shard (MongoDB's default cap)
    heartbeat_s: float = 5.0        # a worker's heartbeat (docs/design.md, Workers)
    failure_share: float = 0.01     # attempts that fail (events stored)
    events_ttl_days: float = 7.0    # events_ttl's default
    chores_counted: int = 64        # live workers counted to share the chores


@dataclass(frozen=True)
class Point:
    """One row: N partitions on S shards, W worker processes."""

    partitions: int
    shards: int
    workers: int


GRID = (
    Point(1, 1, 10), Point(1, 1, 50), Point(1, 4, 50),
    Point(2, 2, 50), Point(4, 2, 50), Point(4, 4, 20), Point(4, 4, 100), Point(8, 4, 100),
    Point(16, 8, 200), Point(32, 16, 400), Point(64, 32, 800),
)


@dataclass(frozen=True)
class Row:
    point: Point
    rate: float            # activities/s
    bound: str             # which limit binds
    shard_rate: float      # the bound of the busiest shard (activities/s of the queue)
    worker_rate: float     # the bound of the workers
    busiest_share: float   # the busiest shard's share of the activities collection
    oplog_hours: float     # the busiest shard's oplog window at `rate`
    events_gb: float       # the events collection at `rate` (failures only), whole TTL
    heartbeats: float      # registry writes/s (primary shard)
    registry_keys: float   # registry index keys read/s (each heartbeat counts the live)
    idle_claims: float     # shard queries/s of an idle polling fleet (one probe per
                           # worker per poll, asked of every shard holding activities)
    chore_commands: float  # shard commands/s of the shared chores


def evaluate(point: Point, costs: Costs = Costs(), ha: Assumptions = Assumptions()) -> Row:
    """The rate and the loads of `point` (docs/scale.md, "The model")."""
    n, s, w = point.partitions, point.shards, point.workers
    holding = min(n, s)  # shards that hold activities: a partition lives on one shard
    busiest = math.ceil(n / holding) / n if n > 1 else 1.0  # its share of the activities
    results_share = 1.0 / s  # results sharded by a hashed _id when there are shards
    extra = costs.partition_index if n > 1 else 0.0
    docs = costs.activity_docs * busiest + costs.result_docs * results_share
    index = (costs.activity_index + extra) * busiest + costs.result_index * results_share
    heartbeats = w / ha.heartbeat_s  # one update each, on the primary shard (unsharded)
    free_docs = ha.doc_writes - heartbeats
    free_index = ha.index_writes - heartbeats  # last_heartbeat's TTL index entry
    by_docs, by_index = free_docs / docs, free_index / index
    shard_rate = min(by_docs, by_index)
    worker_rate = w * 1000.0 / costs.client_cpu_ms
    rate = min(shard_rate, worker_rate)
    if worker_rate <= shard_rate:
        bound = "workers (client CPU)"
    else:
        bound = "shard document writes" if by_docs <= by_index else "shard index writes"
    oplog_rate = rate * busiest * costs.oplog_bytes  # bytes/s into the busiest oplog
    oplog_hours = ha.oplog_gb * 1e9 / oplog_rate / 3600
    events_gb = (rate * ha.failure_share * costs.events_per_failure * costs.event_bytes
                 * ha.events_ttl_days * 86400 / 1e9)
    # Shared chores: the fleet runs each about once per interval while at most
    # `chores_counted` workers are counted; beyond, each runs every 64 intervals. Each run
    # of a chore is a query across the queue: one command per shard holding activities.
    per_second = 1.0 + 1 / 15 + 1 / 15 + 1 / 600  # scheduler, reaper, repair, retention
    chore_commands = max(1.0, w / ha.chores_counted) * per_second * holding
    return Row(point, rate, bound, shard_rate, worker_rate, busiest, oplog_hours, events_gb,
               heartbeats, heartbeats * w, w * holding, chore_commands)


def table(rows: list[Row]) -> str:
    """The markdown table docs/scale.md shows."""
    out = ["| partitions | shards | workers | activities/s | bound by | busiest shard's share "
           "| oplog window (h) | events kept (GB) | registry writes/s | registry keys read/s "
           "| idle polls (shard queries/s) | chore commands/s |",
           "| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        p = r.point
        out.append(f"| {p.partitions} | {p.shards} | {p.workers} | {r.rate:,.0f} | {r.bound} "
                   f"| {r.busiest_share:.2f} | {r.oplog_hours:.1f} | {r.events_gb:.0f} "
                   f"| {r.heartbeats:,.0f} | {r.registry_keys:,.0f} | {r.idle_claims:,.0f} "
                   f"| {r.chore_commands:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ha = Assumptions()
    parser.add_argument("--doc-writes", type=float, default=ha.doc_writes,
                        help="document writes/s one primary sustains")
    parser.add_argument("--index-writes", type=float, default=ha.index_writes,
                        help="index-entry writes/s one primary sustains")
    parser.add_argument("--oplog-gb", type=float, default=ha.oplog_gb)
    parser.add_argument("--failure-share", type=float, default=ha.failure_share)
    parser.add_argument("--json", action="store_true", help="every figure as JSON")
    args = parser.parse_args(argv)
    ha = replace(ha, doc_writes=args.doc_writes, index_writes=args.index_writes,
                 oplog_gb=args.oplog_gb, failure_share=args.failure_share)
    rows = [evaluate(point, Costs(), ha) for point in GRID]
    if args.json:
        data: dict[str, Any] = {"costs": asdict(Costs()), "assumptions": asdict(ha),
                                "rows": [asdict(r) for r in rows]}
        print(json.dumps(data, indent=2))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

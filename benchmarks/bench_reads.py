"""What one run of each read command costs the server, against the finished history kept.

Issue 15: `stats`, every `metrics serve` scrape and `queues` must cost the same with
60 million finished activities as with 60 thousand. For each history size this
script builds one queue with the SAME live work (pending, scheduled, running,
dead-lettered, the last hour's completions and failures) and that many finished
activities older than an hour (synthetic documents inserted directly with
`insert_many`, 1 % of them failed), then runs each read command as a user does
(the CLI, in this process) and counts what every command it sends makes the
server examine:

- on a real MongoDB (`RUNNERQ_BENCH_MONGO_URI`): `explain` (executionStats) of each
  find, aggregate and count the command sent, as captured by a pymongo
  CommandListener: `totalKeysExamined` and `totalDocsExamined`, summed;
- on the dev server (mongoeco, which has no real indexes): a counting model, each
  command's filter (a pipeline's first `$match`) evaluated as a count, capped by the
  command's limit (a `$limit` right after the `$sort` or the `$match`); a count without a filter
  (`estimated_document_count`) is collection metadata: 0. The output says which.

    python benchmarks/bench_reads.py                    # dev server: 2k and 20k history
    python benchmarks/bench_reads.py --sizes 10000,100000
    python benchmarks/bench_reads.py --million          # adds 1,000,000
    RUNNERQ_BENCH_MONGO_URI=mongodb://localhost:27017 python benchmarks/bench_reads.py \\
        --sizes 10000,100000

The last column is the ratio of the largest size to the smallest: 1.0 means the
command's cost does not depend on the history kept. Figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

from benchserver import start_server
from wirecount import Record, WireCounter

COMMANDS: dict[str, list[str]] = {
    "stats -o json": ["stats", "-o", "json"],
    "stats --by type": ["stats", "--by", "type"],
    "stats -o openmetrics (= one scrape)": ["stats", "-o", "openmetrics"],
    "queues": ["queues"],
    "doctor": ["doctor"],
    "list dead-letter (first page)": ["list", "dead-letter"],
    "list completed (first page)": ["list", "completed"],
}
LIVE = {"pending": 200, "scheduled": 50, "processing": 20, "dead_letter": 30,
        "completed_last_hour": 300, "failed_last_hour": 10}
TYPES = ("email", "resize", "report", "sync")
BATCH = 5_000  # documents per insert_many on a real MongoDB
DEV_BATCH = 100  # the dev server's insert_many slows down more than linearly with its size
EXPLAINED = ("find", "aggregate", "count", "distinct")
# A loaded dev server can take seconds to answer: wait rather than fail the run.
PATIENT = {"server_selection_timeout": "120s", "connect_timeout": "120s",
           "socket_timeout": "600s"}
DROPPED_FIELDS = ("lsid", "$db", "$clusterTime", "$readPreference", "txnNumber", "signature",
                  "batchSize")


def activity(now: datetime, status: str, finished_ago: float | None, n: int) -> dict[str, Any]:
    """A synthetic activity document of the shape the code writes (docs/design.md)."""
    created = now - timedelta(seconds=(finished_ago or 0) + 5)
    doc: dict[str, Any] = {
        "_id": uuid.uuid4(), "activity_type": TYPES[n % len(TYPES)], "payload": {"n": n},
        "priority": 2 + n % 2, "status": status, "created_at": created, "retry_count": 0,
        "max_retries": 3, "timeout_seconds": 300, "retry_delay_seconds": 1, "metadata": {},
    }
    if finished_ago is not None:
        doc["started_at"] = created + timedelta(seconds=1)
        doc["completed_at"] = now - timedelta(seconds=finished_ago)
    if status in ("failed", "dead_letter"):
        doc["last_error"] = "boom"
    return doc


def build(uri: str, database: str, history: int, failed_share: float, batch: int,
          live: dict[str, int]) -> None:
    """The queue `bench` in `database`: the fixed live work `live`, then `history` finished
    ones."""
    from pymongo import MongoClient

    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.queue.queue import ActivitySpec
    from runnerq_cli.config import load_settings

    MongoClient(uri).drop_database(database)
    settings = load_settings(None, overrides={"uri": uri, "database": database,
                                              "queue": "bench", **PATIENT},
                             environ={"RUNNERQ_CONFIG": ""})
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    # A client of its own, without the CLI's timeouts: big batches take a while on a dev server.
    activities = MongoClient(uri, uuidRepresentation="standard")[database][
        rq.context.activities.name]
    # The history first, the live work last: the windows (throughput 5 min, latency
    # 15 min, history 1 h) then hold the same activities when the commands run.
    now = datetime.now(UTC)
    every = round(1 / failed_share) if failed_share > 0 else 0
    done = 0
    while done < history:
        size = min(batch, history - done)
        activities.insert_many([
            activity(now, "failed" if every and (done + i) % every == 0 else "completed",
                     7200 + (done + i) * 3, done + i) for i in range(size)], ordered=False)
        done += size
        if done % 10_000 == 0:
            print(f"  {done:,} / {history:,}", file=sys.stderr, flush=True)
    rq.enqueue_many([ActivitySpec(TYPES[n % 4], {"n": n}) for n in range(live["pending"])
                     ] + [ActivitySpec("charge", {}, max_retries=1)
                          for _ in range(live["dead_letter"] + live["processing"])])
    claims = rq.dequeue("bench-worker", limit=live["dead_letter"] + live["processing"],
                        types=["charge"])
    for claim in claims[:live["dead_letter"]]:
        rq.ack_failure(claim, "boom", retryable=True)  # max_retries 1: dead-lettered
    rq.enqueue_many([ActivitySpec("resize", {}, delay_seconds=3600)
                     for _ in range(live["scheduled"])])
    rq.registry.register_worker("bench-worker", types=list(TYPES), concurrency=4)
    now = datetime.now(UTC)
    recent = [activity(now, "completed", 3600 * (n + 0.5) / live["completed_last_hour"], n)
              for n in range(live["completed_last_hour"])]
    recent += [activity(now, "failed", 3600 * (n + 0.5) / live["failed_last_hour"], n)
               for n in range(live["failed_last_hour"])]
    for start in range(0, len(recent), DEV_BATCH):
        activities.insert_many(recent[start:start + DEV_BATCH], ordered=False)


def _explain_totals(explained: Any) -> tuple[int, int]:
    """Keys and documents examined, summed over every executionStats (not its candidates)."""
    keys = docs = 0
    if isinstance(explained, Mapping):
        stats = explained.get("executionStats")
        if isinstance(stats, Mapping):
            return int(stats.get("totalKeysExamined", 0)), int(stats.get("totalDocsExamined", 0))
        items: Any = explained.values()
    elif isinstance(explained, list):
        items = explained
    else:
        return 0, 0
    for item in items:
        k, d = _explain_totals(item)
        keys, docs = keys + k, docs + d
    return keys, docs


def explained_work(client: Any, record: Record) -> tuple[int, int]:
    """(keys, docs) examined by one command, from the server's explain."""
    if record.name not in EXPLAINED or not record.ok:
        return 0, 0
    command = {k: v for k, v in record.command.items() if k not in DROPPED_FIELDS}
    if record.name == "aggregate":
        command["cursor"] = {}
    answer = client[record.database].command({"explain": command,
                                              "verbosity": "executionStats"})
    return _explain_totals(answer)


def modelled_work(client: Any, record: Record) -> int:
    """Documents or keys the command's filter matches (capped by its limit): the model."""
    if record.name not in EXPLAINED or not record.ok:
        return 0
    cmd = record.command
    collection = client[record.database][str(cmd[record.name])]
    limit: int | None = None
    if record.name == "find":
        query = cmd.get("filter") or {}
        limit = (int(cmd.get("limit") or 0) + int(cmd.get("skip") or 0)) or None
    elif record.name == "aggregate":
        pipeline = list(cmd.get("pipeline") or [])
        query = pipeline[0].get("$match", {}) if pipeline else {}
        for before, stage in itertools.pairwise(pipeline):
            # a $limit right after the $sort or the $match: the scan stops there
            if ("$sort" in before or "$match" in before) and "$limit" in stage:
                limit = int(stage["$limit"])
                break
    elif record.name == "count":
        if not cmd.get("query"):
            return 0  # estimated_document_count: the collection's metadata
        query = cmd["query"]
    else:
        query = cmd.get("query") or {}
    matched = collection.count_documents(query)
    return min(matched, limit) if limit else matched


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith("RUNNERQ_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        for key in values:
            os.environ.pop(key, None)
        os.environ.update(saved)


def measure(uri: str, database: str, counter: WireCounter, real: bool,
            detail: bool = False) -> dict[str, dict]:
    """Run every command once; what its commands made the server examine."""
    from pymongo import MongoClient

    from runnerq_cli.cli.app import main

    client: MongoClient[dict[str, Any]] = MongoClient(uri, uuidRepresentation="standard")
    out: dict[str, dict] = {}
    with environment({"RUNNERQ_MONGO_URI": uri, "RUNNERQ_DATABASE": database,
                      "RUNNERQ_QUEUE": "bench", "RUNNERQ_CONFIG": "", "NO_COLOR": "1",
                      **{f"RUNNERQ_{k.upper()}": v for k, v in PATIENT.items()}}):
        for name, args in COMMANDS.items():
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                main(list(args))  # once to warm up (imports, connection)
            counter.take()
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                code = main(list(args))
            records = counter.take()
            keys = docs = work = 0
            lines = []
            for record in records:
                if real:
                    k, d = explained_work(client, record)
                    keys, docs = keys + k, docs + d
                    lines.append(f"{record.name} {k} keys {d} docs")
                else:
                    w = modelled_work(client, record)
                    work += w
                    lines.append(f"{record.name} {w}")
                if detail:
                    lines[-1] += " " + str({k: v for k, v in record.command.items()
                                            if k not in DROPPED_FIELDS})[:300]
            counted = [r for r in records if r.name != "getMore"]
            out[name] = {"exit": code, "commands": len(counted), "keys": keys, "docs": docs,
                         "work": (keys + docs) if real else work}
            if detail:
                print(f"{database} {name}:\n  " + "\n  ".join(lines), file=sys.stderr)
    client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,20000",
                        help="finished history sizes, comma-separated (default 2000,20000)")
    parser.add_argument("--million", action="store_true", help="also 1,000,000")
    parser.add_argument("--model", action="store_true",
                        help="the counting model even on a real MongoDB (tests)")
    parser.add_argument("--detail", action="store_true",
                        help="each command's commands and their work, on stderr")
    parser.add_argument("--failed-share", type=float, default=0.01,
                        help="share of the history that failed (default 0.01)")
    parser.add_argument("--exact-up-to", type=int, default=None,
                        help="count completed exactly up to N (default the product's "
                             "10,000): below it `stats` reads every completed key, so a "
                             "test on small histories sets it under them")
    parser.add_argument("--live-scale", type=float, default=1.0,
                        help="the fixed live work times this (default 1; the test runs "
                             "0.2: the same shape, a fifth of the dev server's time)")
    args = parser.parse_args()
    live = {k: max(1, round(v * args.live_scale)) for k, v in LIVE.items()}
    if args.exact_up_to is not None:  # both names: metrics.py imports the constant
        from runnerq_cli.backend.domain import queries
        from runnerq_cli.backend.views import metrics

        queries.EXACT_COMPLETED_UP_TO = metrics.EXACT_COMPLETED_UP_TO = args.exact_up_to
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.million:
        sizes.append(1_000_000)
    from pymongo import monitoring

    counter = WireCounter()
    monitoring.register(counter)  # every client made from now on, the CLI's too
    uri, proc = start_server()
    real = proc is None and not args.model
    try:
        results = {}
        for size in sizes:
            database = f"bench_reads_{size}"
            print(f"building: history {size:,} ...", file=sys.stderr, flush=True)
            build(uri, database, size, args.failed_share, BATCH if real else DEV_BATCH, live)
            results[size] = measure(uri, database, counter, real, args.detail)
            if proc is None:
                from pymongo import MongoClient

                MongoClient(uri).drop_database(database)
    finally:
        if proc is not None:
            proc.kill()
    method = ("explain executionStats (keys + documents examined)" if real else
              "counting model on the dev server (documents/keys each command's filter "
              "matches, capped by its limit)")
    print(f"method: {method}")
    print(f"live work (fixed): {live}; history: {args.failed_share:.0%} failed, the rest "
          "completed, all finished over an hour ago")
    header = " | ".join(f"history {s:,}" for s in sizes)
    print(f"| command | {header} | ×{sizes[-1] // sizes[0]} history → work |")
    print("| --- |" + " --- |" * (len(sizes) + 1))
    for name in COMMANDS:
        cells = []
        for size in sizes:
            r = results[size][name]
            detail = f" ({r['keys']} keys, {r['docs']} docs)" if real else ""
            cells.append(f"{r['work']:,}{detail}, {r['commands']} cmds"
                         + ("" if r["exit"] in (0, 7) else f", exit {r['exit']}"))
        first, last = results[sizes[0]][name]["work"], results[sizes[-1]][name]["work"]
        ratio = f"×{last / first:.2f}" if first else ("×1.00" if not last else "n/a")
        print(f"| `{name}` | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()

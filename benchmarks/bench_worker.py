"""Benchmark: what one activity costs the server, worker and raw loop side by side, one run.

    python benchmarks/bench_worker.py [-n 300] [--concurrency 4] [--rounds 7]
                                      [--failure-n N] [--check-targets] [--no-metrics]
                                      [--no-failures]

Server: RUNNERQ_BENCH_MONGO_URI, else a mongoeco dev server started in a
separate process (so its CPU is not counted as client CPU).

Reports, per activity over the whole life enqueue -> claim -> complete (with
result and events), for the worker and for a hand-written pymongo loop
(`insert_many`, `find_one_and_update` claim, `update_one` complete): documents
written and index entries changed (by collection), bytes sent and received,
commands, client CPU, and the server's activities/s. Client CPU is noisy on a
shared machine, so the two run `--rounds` times (default 7), alternating which goes first,
and the CPU ratio is the median of the rounds' ratios. Then the same per attempt
for the failure paths: a retry, a dead-letter, a lease expiry (the reaper's
requeue) and an operator retry. Checks the targets of issue 7 (PASS/FAIL) and
writes JSON to benchmarks/results/. How documents and index entries are
counted: benchmarks/README.md ("How the figures are counted"). Each round also runs
the worker with metrics on (a `PrometheusMetrics` sink, worker/metrics.py) where this
version has them, so the ratios worker/raw and metrics-on/off are side by side, round
by round (issue 31: metrics on costs at most 5 % more client CPU per activity).

Uses only the public API (RunnerQ, ActivitySpec, Worker, HandlerRegistry,
init_indexes) and raw pymongo, so it measures any version of the write path.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pymongo import MongoClient, ReturnDocument, monitoring

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchserver import start_server
from wirecount import IndexCatalog, Record, WireCounter, tally

from runnerq_cli.backend.store.connection import client_for

COUNTER = WireCounter()
monitoring.register(COUNTER)  # before any client exists

# Issue 7's targets for the worker's success path (per activity).
TARGETS = (("documents written", "documents_written", 5.0),
           ("index entries changed", "index_entries_changed", 15.0),
           ("bytes sent+received", "bytes_total", 2048.0),
           ("commands", "commands", 2.2))
CPU_TARGET_RATIO = 1.5


# ------------------------------------------------------------------ measuring


@dataclass
class Measured:
    """What one measured block cost: its commands (records), client CPU and wall time."""

    records: list[Record] = field(default_factory=list)
    cpu_seconds: float = 0.0
    seconds: float = 0.0
    switches: tuple[int, int] = (0, 0)  # context switches: voluntary, involuntary
    calls: int | None = None  # Python calls, when counted (see count_calls)

    def figures(self, catalog: IndexCatalog, units: int) -> dict[str, Any]:
        """Per-unit figures; call before the database is dropped (indexes are listed)."""
        out = tally(self.records, catalog).per(units)
        per = max(units, 1)
        out["cpu_ms"] = round(self.cpu_seconds * 1000 / per, 4)
        out["switches_voluntary"] = round(self.switches[0] / per, 2)
        out["switches_involuntary"] = round(self.switches[1] / per, 2)
        if self.calls is not None:
            out["python_calls"] = round(self.calls / per, 1)
        out["units"] = units
        return out


@contextlib.contextmanager
def measure() -> Iterator[Measured]:
    COUNTER.take()  # whatever ran before (setup, index listings) is not this block's
    measured = Measured()
    calls = CALLS.get("count")
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        yield measured
    finally:
        measured.cpu_seconds = time.process_time() - cpu0
        measured.seconds = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        measured.switches = (usage.ru_nvcsw - usage0.ru_nvcsw, usage.ru_nivcsw - usage0.ru_nivcsw)
        if calls is not None:
            measured.calls = CALLS["count"] - calls
        measured.records = COUNTER.take()


# Python calls made by every thread while `count_calls` is on (its CPU figures are not).
CALLS: dict[str, int] = {}


def _count_call(frame: Any, event: str, arg: Any) -> None:
    if event in ("call", "c_call"):
        CALLS["count"] += 1  # a data race between threads loses a few: an estimate


@contextlib.contextmanager
def count_calls() -> Iterator[None]:
    """Count Python calls (functions and builtins) of all threads, new ones included."""
    CALLS["count"] = 0
    sys.setprofile(_count_call)
    threading.setprofile(_count_call)
    try:
        yield
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)
        CALLS.pop("count", None)


# ------------------------------------------------------------------- the raw loop


def bench_raw(uri: str, n: int) -> dict[str, Any]:
    client: MongoClient[dict[str, Any]] = MongoClient(uri, uuidRepresentation="standard",
                                                      tz_aware=True)
    db = client[f"bench_raw_{uuid.uuid4().hex[:8]}"]
    col = db.activities
    col.create_index([("status", 1), ("priority", -1), ("created_at", 1)])
    catalog = IndexCatalog(client)
    catalog.prime(db.name)
    done = 0
    with measure() as whole:
        now = datetime.now(UTC)
        col.insert_many([{"_id": uuid.uuid4(), "activity_type": "noop", "payload": {"i": i},
                          "priority": 2, "status": "pending", "created_at": now,
                          "retry_count": 0} for i in range(n)])
        with measure_inner() as run:
            while True:
                doc = col.find_one_and_update(
                    {"status": "pending"},
                    {"$set": {"status": "processing", "lease_id": uuid.uuid4().hex,
                              "started_at": datetime.now(UTC)}},
                    sort=[("priority", -1), ("created_at", 1)],
                    return_document=ReturnDocument.AFTER)
                if doc is None:
                    break
                col.update_one({"_id": doc["_id"], "lease_id": doc["lease_id"]},
                               {"$set": {"status": "completed",
                                         "completed_at": datetime.now(UTC), "result": None}})
                done += 1
    figures = whole.figures(catalog, n)
    client.drop_database(db.name)
    client.close()
    assert done == n, (done, n)
    figures.update(seconds=round(run.seconds, 3),
                   activities_per_second=round(n / run.seconds, 1),
                   note="no events, no result collection, no lease renewal, no retries")
    return figures


@dataclass
class Wall:
    seconds: float = 0.0


@contextlib.contextmanager
def measure_inner() -> Iterator[Wall]:
    """Wall time of the claim -> complete phase only (throughput), inside `measure`."""
    wall = Wall()
    t0 = time.perf_counter()
    try:
        yield wall
    finally:
        wall.seconds = time.perf_counter() - t0


# --------------------------------------------------------------------- worker


def new_backend(uri: str, database: str, queue: str) -> Any:
    from runnerq_cli import RunnerQ, load_settings

    settings = load_settings(None, overrides={"uri": uri, "database": database, "queue": queue},
                             environ={"RUNNERQ_CONFIG": ""})
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


def metrics_sink() -> Any:
    """A Prometheus sink in a registry of its own, or None where this version has none."""
    try:
        from runnerq_cli.worker.metrics import PrometheusMetrics
    except ImportError:
        return None
    return PrometheusMetrics()


def quiet_worker(backend: Any, registry: Any, concurrency: int, metrics: Any = None) -> Any:
    """A burst worker whose log goes nowhere (if this version's Worker takes a log), with
    `metrics` as its sink when given."""
    from runnerq_cli import Worker

    kwargs: dict[str, Any] = {} if metrics is None else {"metrics": metrics}
    with contextlib.suppress(Exception):
        from runnerq_cli.worker.logs import WorkerLog

        kwargs["log"] = WorkerLog("plain", "warning", stream=io.StringIO())
    try:
        return Worker(backend, registry, burst=True, concurrency=concurrency, **kwargs)
    except TypeError:
        return Worker(backend, registry, burst=True, concurrency=concurrency)


def activities(db: Any, queue: str) -> Any:
    """The activities collection, by docs/design.md's name (a data contract, not an internal)."""
    return db[f"runnerq_{queue}_activities"]


def bench_worker(uri: str, n: int, concurrency: int, metrics: bool = False) -> dict[str, Any]:
    from runnerq_cli import ActivitySpec, HandlerRegistry

    database = f"bench_worker_{uuid.uuid4().hex[:8]}"
    backend = new_backend(uri, database, "bench")
    catalog = IndexCatalog(client_for(backend.settings))
    catalog.prime(database)
    registry = HandlerRegistry()
    registry.add("noop", lambda payload: None)
    with measure() as whole:
        backend.enqueue_many([ActivitySpec("noop", {"i": i}) for i in range(n)])
        sink = metrics_sink() if metrics else None
        worker = quiet_worker(backend, registry, concurrency, sink)
        with measure_inner() as run:
            code = worker.run(install_signals=False)
    figures = whole.figures(catalog, n)
    acts = activities(backend.db, "bench")
    ids = [d["_id"] for d in acts.find({}, {"_id": 1}).limit(20)]
    check = {
        "end": str(code),
        "completed": acts.count_documents({"status": "completed"}),
        "results_of_20_sampled": sum(backend.get_result(i) is not None for i in ids),
        "outboxes_left": acts.count_documents({"outbox": {"$exists": True}}),
    }
    client_for(backend.settings).drop_database(database)
    # A clean end: 0 (older versions) or WorkerEnd.STOPPED ("stopped", a StrEnum).
    assert str(code) in ("0", "stopped") and check["completed"] == n \
        and check["results_of_20_sampled"] == len(ids), check
    figures.update(seconds=round(run.seconds, 3), activities_per_second=round(n / run.seconds, 1),
                   check=check)
    return figures


# -------------------------------------------------------------- failure paths


class Attempts:
    """Handler calls by payload number (thread-safe): the handlers' memory of attempts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[int, int] = {}

    def __call__(self, payload: dict[str, Any]) -> int:
        with self.lock:
            self.seen[payload["i"]] = self.seen.get(payload["i"], 0) + 1
            return self.seen[payload["i"]]

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.seen.values())


def bench_failures(uri: str, m: int, concurrency: int) -> dict[str, Any]:
    """Retry, dead-letter, lease expiry and operator retry; figures per attempt."""
    from runnerq_cli import ActivitySpec, HandlerRegistry, RetryableError

    database = f"bench_fail_{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    client = None
    try:
        # A retry: the first attempt fails (retryable, no back-off), the second succeeds.
        backend = new_backend(uri, database, "retry")
        client = client_for(backend.settings)
        catalog = IndexCatalog(client)
        flaky = Attempts()

        def flaky_handler(payload: dict[str, Any]) -> dict[str, int]:
            if flaky(payload) == 1:
                raise RetryableError("first attempt fails")
            return {"i": payload["i"]}

        registry = HandlerRegistry()
        registry.add("flaky", flaky_handler)
        catalog.prime(database)
        with measure() as block:
            backend.enqueue_many([ActivitySpec("flaky", {"i": i}, retry_delay_seconds=0)
                                  for i in range(m)])
            code = quiet_worker(backend, registry, concurrency).run(install_signals=False)
        acts = activities(backend.db, "retry")
        out["retry"] = block.figures(catalog, flaky.total)
        out["retry"]["check"] = {"end": str(code), "attempts": flaky.total,
                                 "expected_attempts": 2 * m,
                                 "completed": acts.count_documents({"status": "completed"}),
                                 "expected_completed": m}

        # A dead-letter: every attempt fails; max_retries 2 (attempts in all).
        backend = new_backend(uri, database, "dead")
        doomed = Attempts()

        def doomed_handler(payload: dict[str, Any]) -> None:
            doomed(payload)
            raise RetryableError("always fails")

        registry = HandlerRegistry()
        registry.add("doomed", doomed_handler)
        catalog.prime(database)
        with measure() as block:
            backend.enqueue_many([ActivitySpec("doomed", {"i": i}, max_retries=2,
                                               retry_delay_seconds=0) for i in range(m)])
            code = quiet_worker(backend, registry, concurrency).run(install_signals=False)
        acts = activities(backend.db, "dead")
        dead_records = backend.db["runnerq_dead_dead_letter"]
        out["dead_letter"] = block.figures(catalog, doomed.total)
        out["dead_letter"]["check"] = {
            "end": str(code), "attempts": doomed.total,
            "dead_lettered": acts.count_documents({"status": "dead_letter"}),
            "dead_letter_records": dead_records.count_documents({}), "expected": m}

        # An operator retry of each dead-lettered activity (it becomes pending again).
        dead_ids = [d["_id"] for d in acts.find({"status": "dead_letter"}, {"_id": 1})]
        with measure() as block:
            for aid in dead_ids:
                backend.operator.retry(aid)
        out["operator_retry"] = block.figures(catalog, len(dead_ids))
        out["operator_retry"]["check"] = {
            "retried": len(dead_ids),
            "pending": acts.count_documents({"status": "pending"}),
            "dead_letter_records": dead_records.count_documents({}), "expected_records": 0}

        # A lease expiry: claimed with a 1 s lease and never acknowledged; the reaper
        # (requeue_expired) hands the activities back once the lease has run out.
        backend = new_backend(uri, database, "lease")
        backend.enqueue_many([ActivitySpec("held", {"i": i}) for i in range(m)])
        catalog.prime(database)
        claimed: list[Any] = []
        with measure() as claim_block:
            while len(claimed) < m:
                got = backend.dequeue("bench-lease-holder", lease_seconds=1,
                                      limit=m - len(claimed))
                if not got:
                    break
                claimed += got
        expired_at = time.monotonic() + 1.1
        time.sleep(max(0.0, expired_at - time.monotonic()))  # a benchmark, not a test
        requeued = 0
        with measure() as block:
            for _ in range(20):
                counts = backend.requeue_expired()
                requeued += (sum(int(v) for v in counts.values()) if isinstance(counts, dict)
                             else int(counts))
                if requeued >= len(claimed):
                    break
        acts = activities(backend.db, "lease")
        out["lease_expiry"] = block.figures(catalog, max(requeued, 1))
        out["lease_expiry"]["claim_with_short_lease"] = claim_block.figures(
            catalog, max(len(claimed), 1))
        out["lease_expiry"]["check"] = {"claimed": len(claimed), "requeued": requeued,
                                        "pending": acts.count_documents({"status": "pending"}),
                                        "expected": m}
    finally:
        if client is not None:
            client.drop_database(database)
    return out


CHECKS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "retry": lambda c: c["attempts"] == c["expected_attempts"]
    and c["completed"] == c["expected_completed"],
    "dead_letter": lambda c: c["dead_lettered"] == c["expected"]
    and c["dead_letter_records"] == c["expected"],
    "operator_retry": lambda c: c["pending"] == c["retried"]
    and c["dead_letter_records"] == c["expected_records"],
    "lease_expiry": lambda c: c["claimed"] == c["requeued"] == c["pending"] == c["expected"],
}


# -------------------------------------------------------------------- report


def by_collection(figures: dict[str, Any], key: str) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in figures[key].items()) or "-"


def check_targets(worker: dict[str, Any], cpu_ratio: float) -> list[dict[str, Any]]:
    """Issue 7's targets for the worker's success path, each with its figure and verdict."""
    targets = [{"target": label, "key": key, "value": worker[key], "limit": limit,
                "pass": worker[key] <= limit} for label, key, limit in TARGETS]
    targets.append({"target": "client CPU, worker / raw loop (median of the rounds)",
                    "key": "cpu_ratio", "value": round(cpu_ratio, 3),
                    "limit": CPU_TARGET_RATIO, "pass": cpu_ratio <= CPU_TARGET_RATIO})
    return targets


def run_rounds(uri: str, n: int, concurrency: int, rounds: int, with_metrics: bool = True,
               ) -> tuple[dict[str, Any], dict[str, Any], list[float], dict[str, Any] | None]:
    """Worker and raw loop `rounds` times, alternating which goes first (the machine's
    speed drifts); the first round's figures, with the medians of CPU, context switches
    and activities/s, and each round's CPU ratio worker/raw. With metrics (where this
    version has them) each round runs the worker with a Prometheus sink too, last or
    first, turn about; its figures carry each round's ratio on/off."""
    with_metrics = with_metrics and metrics_sink() is not None
    raws: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    metered: list[dict[str, Any]] = []
    for i in range(rounds):
        order = ["raw", "worker", "metrics"] if i % 2 == 0 else ["metrics", "worker", "raw"]
        for what in order:
            if what == "raw":
                raws.append(bench_raw(uri, n))
            elif what == "worker":
                workers.append(bench_worker(uri, n, concurrency))
            elif with_metrics:
                metered.append(bench_worker(uri, n, concurrency, metrics=True))
    ratios = [w["cpu_ms"] / r["cpu_ms"] for w, r in zip(workers, raws, strict=True)]
    raw, worker = dict(raws[0]), dict(workers[0])
    on: dict[str, Any] | None = None
    sides = [(raw, raws), (worker, workers)]
    if metered:
        on = dict(metered[0])
        on["cpu_ratio_on_off_by_round"] = [round(m["cpu_ms"] / w["cpu_ms"], 4)
                                           for m, w in zip(metered, workers, strict=True)]
        on["cpu_ratio_on_off"] = round(statistics.median(on["cpu_ratio_on_off_by_round"]), 4)
        on["cpu_ratio_to_raw_by_round"] = [round(m["cpu_ms"] / r["cpu_ms"], 4)
                                           for m, r in zip(metered, raws, strict=True)]
        sides.append((on, metered))
    for figures, runs in sides:
        figures["cpu_ms_by_round"] = [f["cpu_ms"] for f in runs]
        for key in ("cpu_ms", "switches_voluntary", "switches_involuntary",
                    "activities_per_second"):
            figures[key] = round(statistics.median(f[key] for f in runs), 4)
    return worker, raw, ratios, on


def report_metrics(on: dict[str, Any] | None, worker: dict[str, Any],
                   ratios: list[float]) -> None:
    """The metrics-on variant beside the worker without: CPU per activity, the ratios."""
    if on is None:
        print("metrics on: not measured (this version has no worker metrics, or "
              "--no-metrics)")
        return
    print(f"client CPU ms per activity: worker {worker['cpu_ms']:.3f}, worker with "
          f"metrics {on['cpu_ms']:.3f} (medians)")
    print("by round, worker/raw | metrics-on/raw | metrics on/off: " + "; ".join(
        f"{r:.2f} | {m:.2f} | {o:.3f}" for r, m, o in zip(
            ratios, on["cpu_ratio_to_raw_by_round"], on["cpu_ratio_on_off_by_round"],
            strict=True)))
    if "python_calls" in on:
        print(f"Python calls per activity (profiled): with metrics {on['python_calls']:.0f}, "
              f"without {worker.get('python_calls', 0):.0f}")
    print(f"metrics on/off, median of the rounds: {on['cpu_ratio_on_off']:.3f} "
          f"(target <= 1.05); commands per activity {on['commands']:.3f} "
          f"(without {worker['commands']:.3f})")


def report(worker: dict[str, Any], raw: dict[str, Any], failures: dict[str, Any],
           targets: list[dict[str, Any]], server_label: str, n: int, concurrency: int,
           ratios: list[float]) -> None:
    """Print the success table (targets beside the figures), the failure paths, the verdicts."""
    print(f"server: {server_label}; n={n}; worker concurrency={concurrency}; "
          f"rounds={len(ratios)} (CPU and activities/s: medians)")
    print()
    verdict = {t["key"]: f"<= {t['limit']:g} {'PASS' if t['pass'] else 'FAIL'}" for t in targets}
    rows = [("per activity (success path)", "worker", "raw loop", "target")]
    for label, key, fmt in (("documents written", "documents_written", ".2f"),
                            ("index entries changed", "index_entries_changed", ".2f"),
                            ("bytes sent", "bytes_sent", ".0f"),
                            ("bytes received", "bytes_received", ".0f"),
                            ("bytes sent+received", "bytes_total", ".0f"),
                            ("commands", "commands", ".3f"),
                            ("client CPU ms", "cpu_ms", ".3f"),
                            ("context switches, voluntary", "switches_voluntary", ".2f"),
                            ("context switches, involuntary", "switches_involuntary", ".2f"),
                            (f"{server_label} activities/s", "activities_per_second", ".1f")):
        rows.append((label, format(worker[key], fmt), format(raw[key], fmt),
                     verdict.get(key, "")))
    width = max(len(r[0]) for r in rows) + 2
    for label, a, b, target in rows:
        print(f"{label:<{width}}{a:>12}{b:>12}   {target}".rstrip())
    ratio = worker["activities_per_second"] / raw["activities_per_second"]
    print(f"throughput ratio worker/raw ({server_label}): {ratio:.2f}")
    if "python_calls" in worker:
        print(f"Python calls per activity (an extra round, profiled): worker "
              f"{worker['python_calls']:.0f}, raw loop {raw['python_calls']:.0f}")
    print("client CPU ratio worker/raw by round: "
          + ", ".join(f"{r:.2f}" for r in ratios) + f"; median {statistics.median(ratios):.2f}")
    print()
    for side, figures in (("worker", worker), ("raw", raw)):
        print(f"{side} documents by collection: "
              f"{by_collection(figures, 'documents_by_collection')}")
        print(f"{side} index entries by collection: "
              f"{by_collection(figures, 'index_entries_by_collection')}")
        print(f"{side} commands by name: {by_collection(figures, 'commands_by_name')}")
    print()
    header = ("per attempt", "docs", "index", "sent", "received", "commands", "CPU ms")
    print(f"{header[0]:<34}" + "".join(f"{h:>10}" for h in header[1:]))
    labels = {"retry": "retry (fails once, then succeeds)",
              "dead_letter": "dead-letter (max_retries 2)",
              "lease_expiry": "lease expiry (reaper's requeue)",
              "operator_retry": "operator retry of dead-lettered"}
    for key, label in labels.items():
        f = failures[key]
        print(f"{label:<34}{f['documents_written']:>10.2f}{f['index_entries_changed']:>10.2f}"
              f"{f['bytes_sent']:>10.0f}{f['bytes_received']:>10.0f}{f['commands']:>10.3f}"
              f"{f['cpu_ms']:>10.3f}")
    for key, label in labels.items():
        f = failures[key]
        print(f"  {label} ({f['units']} attempts): documents "
              f"{by_collection(f, 'documents_by_collection')}; index entries "
              f"{by_collection(f, 'index_entries_by_collection')}")
        if not CHECKS[key](f["check"]):
            print(f"  CHECK FAILED ({key}): {f['check']}")
    for name, f in (("worker", worker), ("raw", raw), *failures.items()):
        if f["uncounted_writes"]:
            print(f"  WARNING ({name}): {f['uncounted_writes']} bulkWrite commands not counted")
    print()
    print("targets (worker, success path, per activity):")
    for t in targets:
        print(f"{'PASS' if t['pass'] else 'FAIL'} {t['target']}: {t['value']:g} "
              f"(target <= {t['limit']:g})")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("-n", type=int, default=300, help="activities per phase")
    parser.add_argument("--concurrency", type=int, default=4, help="worker concurrency")
    parser.add_argument("--count-calls", action="store_true",
                        help="one more round, profiled, for Python calls per activity")
    parser.add_argument("--rounds", type=int, default=7,
                        help="worker and raw loop pairs (CPU ratio: median of the pairs)")
    parser.add_argument("--failure-n", type=int, default=None,
                        help="activities per failure path (default: n/10, at least 10)")
    parser.add_argument("--check-targets", action="store_true",
                        help="exit 1 when a target fails or a failure path lost an activity")
    parser.add_argument("--no-metrics", action="store_true",
                        help="leave out the worker with metrics on (a third of the time)")
    parser.add_argument("--no-failures", action="store_true",
                        help="leave out the failure paths (the success path's CPU only)")
    args = parser.parse_args()
    failure_n = args.failure_n or max(10, args.n // 10)
    uri, proc = start_server()
    try:
        worker, raw, ratios, on = run_rounds(uri, args.n, args.concurrency, max(1, args.rounds),
                                             with_metrics=not args.no_metrics)
        if args.count_calls:
            with count_calls():
                raw["python_calls"] = bench_raw(uri, args.n)["python_calls"]
                worker["python_calls"] = bench_worker(uri, args.n, args.concurrency)[
                    "python_calls"]
                if on is not None:
                    on["python_calls"] = bench_worker(uri, args.n, args.concurrency,
                                                      metrics=True)["python_calls"]
        failures = {} if args.no_failures else bench_failures(uri, failure_n, args.concurrency)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    label = ("server of RUNNERQ_BENCH_MONGO_URI" if proc is None
             else "dev server (not a real MongoDB)")
    cpu_ratio = statistics.median(ratios)
    targets = check_targets(worker, cpu_ratio)
    if failures:
        report(worker, raw, failures, targets, label, args.n, args.concurrency, ratios)
    else:
        print("client CPU ratio worker/raw by round: "
              + ", ".join(f"{r:.2f}" for r in ratios) + f"; median {cpu_ratio:.2f}")
        if "python_calls" in worker:
            print(f"Python calls per activity (profiled): worker {worker['python_calls']:.0f}, "
                  f"raw loop {raw['python_calls']:.0f}")
    report_metrics(on, worker, ratios)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    path = out / f"bench_worker_{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    ratio = worker["activities_per_second"] / raw["activities_per_second"]
    path.write_text(json.dumps({
        "server": label, "n": args.n, "failure_n": failure_n, "concurrency": args.concurrency,
        "per_activity": {"worker": worker, "raw": raw}, "throughput_ratio": ratio,
        "cpu_ratio_by_round": ratios, "cpu_ratio": cpu_ratio, "metrics_on": on,
        "per_attempt": failures, "targets": targets}, indent=2, default=str))
    print(f"written: {path}")
    broken = [key for key, check in CHECKS.items()
              if key in failures and not check(failures[key]["check"])]
    if args.check_targets and (broken or not all(t["pass"] for t in targets)):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

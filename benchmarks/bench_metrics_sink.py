"""Benchmark: the CPU one attempt's metrics cost the worker, alone (no server, no noise).

    python benchmarks/bench_metrics_sink.py [-n 20000] [--rounds 5]

bench_worker.py measures the worker with metrics on and off end to end, but on a shared
machine a round's CPU moves by ±15 %, more than the effect. This measures what metrics
on adds per activity directly: the calls the worker makes for one attempt
(worker/telemetry.py: `attempt` where it starts, `ended` where its outcome is known,
and the claim's roundtrip histogram) into a `PrometheusMetrics` sink, against the same
loop without them (the `Flight` every attempt has anyway). Prints microseconds of CPU
and Python calls per attempt; divide by bench_worker.py's client CPU per activity for
the share (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from runnerq_cli.backend.domain.documents import Activity, Claim
from runnerq_cli.worker.flights import Flight
from runnerq_cli.worker.metrics import DEQUEUE_ROUNDTRIP_DURATION, PrometheusMetrics
from runnerq_cli.worker.telemetry import Telemetry


def attempt_loops() -> tuple[Callable[[], None], Callable[[], None]]:
    now = datetime.now(UTC)
    act = Activity(id=uuid.uuid4(), activity_type="noop", payload={}, priority=2,
                   status="processing", created_at=now, started_at=now + timedelta(seconds=0.02))
    claim = Claim(act, "0" * 32, "bench", now)
    sink = PrometheusMetrics()
    telemetry = Telemetry(sink, None, queue="bench", concurrency=4, running=lambda: 1)

    def without() -> None:
        Flight(claim, None, None, started=time.monotonic(), timeout_at=0.0,  # type: ignore[arg-type]
               next_renew=0.0, lease_ends=0.0)

    def with_metrics() -> None:
        flight = Flight(claim, None, None, started=time.monotonic(),  # type: ignore[arg-type]
                        timeout_at=0.0, next_renew=0.0, lease_ends=0.0)
        watch = telemetry.attempt(flight)
        flight.finished = time.monotonic()
        watch.ended("completed")
        sink.observe_duration(DEQUEUE_ROUNDTRIP_DURATION, 0.003, telemetry.queue_labels)

    return without, with_metrics


def cpu_us(fn: Callable[[], None], n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - started) / n * 1e6


def calls(fn: Callable[[], None]) -> int:
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0] - 1  # setprofile(None) itself


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("-n", type=int, default=20000, help="attempts per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each (median)")
    args = parser.parse_args()
    without, with_metrics = attempt_loops()
    with_metrics()  # the children exist from the first attempt on, as in a worker
    added = []
    for _ in range(max(1, args.rounds)):
        added.append(cpu_us(with_metrics, args.n) - cpu_us(without, args.n))
    print(f"metrics per attempt: {statistics.median(added):.1f} us of CPU (rounds "
          + ", ".join(f"{a:.1f}" for a in added) + f"); "
          f"{calls(with_metrics) - calls(without)} Python calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())

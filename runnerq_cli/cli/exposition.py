"""Prometheus exposition of queue metrics: a collector, the text format, an HTTP endpoint.

Built on the official `prometheus_client` (its exposition format, parser and
WSGI server): nothing here writes the format by hand. Imported only by
`stats -o prometheus|openmetrics` and `metrics serve`, so `--help` and TAB completion
never load it.

The numbers come from `Inspector.metrics_sample` (backend/views/metrics.py): one
bounded set of indexed queries per queue, whose cost does not grow with the
finished history kept. `runnerq_activities` holds the exact counts; completed
activities, which are not counted one by one, are the estimate
`runnerq_activities_estimated`. A scrape younger than `min_interval` is
answered from the previous one, so many scrapers (or a scraper with a short
interval) do not multiply the load on the server. Each queue is queried on its
own: one that fails is `runnerq_scrape_success{queue=...} 0` and leaves the
others' metrics whole.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from runnerq_cli.backend.domain.outage import is_away
from runnerq_cli.backend.domain.snapshots import percentiles
from runnerq_cli.backend.domain.timing import TIMING

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.outage import OutageWatch
    from runnerq_cli.backend.domain.snapshots import MetricsSample
    from runnerq_cli.worker.metrics import PrometheusMetrics

QUANTILES = {50: "0.5", 95: "0.95", 99: "0.99"}


PRIORITIES = ("critical", "high", "normal", "low")


def _activity_counts(sample: MetricsSample) -> dict[tuple[str, str, str], int]:
    """(status, priority, type) -> count, with a 0 for every exact status and priority of
    every known type: a count that falls to 0 stays a series at 0 instead of vanishing."""
    out = {(status, priority, kind): 0 for kind in sample["known_types"]
           for status in sample["exact_statuses"] for priority in PRIORITIES}
    for row in sample["activities"]:
        key = (row["status"], row["priority"], row["type"])
        out[key] = out.get(key, 0) + row["count"]
    return dict(sorted(out.items()))


class _Families(NamedTuple):
    """The families `families` returns, in the order it returns them (the exposition's
    order): one name per family, so filling them reads as metric names, not indexes."""

    activities: GaugeMetricFamily
    estimated: GaugeMetricFamily
    oldest: GaugeMetricFamily
    finished: GaugeMetricFamily
    waits: GaugeMetricFamily
    runs: GaugeMetricFamily
    sampled: GaugeMetricFamily
    workers: GaugeMetricFamily
    in_flight: GaugeMetricFamily
    paused: GaugeMetricFamily
    type_paused: GaugeMetricFamily
    malformed: GaugeMetricFamily
    schedule_next: GaugeMetricFamily
    schedule_last: GaugeMetricFamily
    schedule_fires: GaugeMetricFamily
    schedule_missed: GaugeMetricFamily
    schedule_skipped: GaugeMetricFamily
    schedule_buffered: GaugeMetricFamily
    schedule_paused: GaugeMetricFamily
    schedule_malformed: GaugeMetricFamily
    limit_in_use: GaugeMetricFamily
    limit_concurrency: GaugeMetricFamily
    limit_held_back: GaugeMetricFamily


def families(samples: list[MetricsSample]) -> list[Metric]:
    """Metric families (HELP and TYPE each) for the samples of one or more queues.

    Every family is a gauge: the numbers are the state of the queue now or over a
    sliding window, which can go down (a retry, retention), so none is a counter
    (`_total`) or a summary (whose `_count` must never decrease). Latency quantiles
    are gauges with a `quantile` label, and their sample size a gauge of its own.
    """
    window = str(int(samples[0]["window_seconds"])) if samples else "300"
    out = _empty_families()
    for sample in samples:
        _add_sample(out, sample, window)
    return list(out)


def _empty_families() -> _Families:
    """The families with their names, HELP texts and labels, and no samples yet. Apart
    from `families` because these declarations are the metrics' documented contract
    (docs/cli.md) and read best on their own, without the filling code between."""
    activities = GaugeMetricFamily(
        "runnerq_activities", "Activities by queue, status, priority and activity type: exact "
        "counts of pending, scheduled, processing, waiting (parked durable activities), failed, "
        "dead_letter and cancelled (and completed while at most 10000 are kept); 0 for a "
        "known type with none.",
        labels=["queue", "status", "priority", "type"])
    estimated = GaugeMetricFamily(
        "runnerq_activities_estimated",
        "Completed activities: exact while at most 10000 are kept, else the collection's "
        "document count (metadata) minus the exact counts of runnerq_activities.",
        labels=["queue", "status"])
    malformed = GaugeMetricFamily(
        "runnerq_malformed_documents",
        "Malformed documents: activities of another shape than docs/design.md's (at most 20 "
        "named per status, as doctor), those set aside as malformed, bad worker entries.",
        labels=["queue"])
    oldest = GaugeMetricFamily(
        "runnerq_oldest_pending_age_seconds",
        "Age of the oldest pending activity (0 when nothing is pending).", labels=["queue"])
    finished = GaugeMetricFamily(
        "runnerq_finished_activities",
        "Activities that reached a terminal status (completed, failed, dead_letter) within "
        "the last window_seconds: a sliding-window gauge, not a counter.",
        labels=["queue", "status", "window_seconds"])
    waits = GaugeMetricFamily(
        "runnerq_queue_wait_seconds",
        "Time from due to claimed, of activities finished within the window: nearest-rank "
        "quantiles over at most the newest 10000 (a gauge per quantile).",
        labels=["queue", "window_seconds", "quantile"])
    runs = GaugeMetricFamily(
        "runnerq_run_seconds",
        "Time from claimed to finished as recorded (the handler, the worker's holding and "
        "the acknowledgement), of activities finished within the window: nearest-rank "
        "quantiles over at most the newest 10000 (a gauge per quantile).",
        labels=["queue", "window_seconds", "quantile"])
    sampled = GaugeMetricFamily(
        "runnerq_latency_sample_size",
        "How many finished activities the latency quantiles of the window were taken over.",
        labels=["queue", "window_seconds", "measure"])
    workers = GaugeMetricFamily(
        "runnerq_workers", "Registered worker processes: live (heartbeat within "
        f"{TIMING.worker_stale_after:g} s) or stale.",
        labels=["queue", "state"])
    in_flight = GaugeMetricFamily(
        "runnerq_in_flight", "Activities running now on live workers.", labels=["queue"])
    paused = GaugeMetricFamily("runnerq_queue_paused",
                               "1 when the whole queue is paused, else 0.", labels=["queue"])
    type_paused = GaugeMetricFamily(
        "runnerq_type_paused", "1 when this activity type is paused (pause --type), else 0; "
        "a series for every known type.", labels=["queue", "type"])
    return _Families(activities, estimated, oldest, finished, waits, runs, sampled, workers,
                     in_flight, paused, type_paused, malformed, *_schedule_families(),
                     *_limit_families())


# The schedules' families, in the exposition's order: (name, help), each a gauge with a
# series per schedule of each queue.
SCHEDULE_FAMILIES = (
    ("runnerq_schedule_next_fire_timestamp_seconds",
     "When the schedule fires next (Unix time, the server's clock); no series when it "
     "never fires again or is malformed."),
    ("runnerq_schedule_last_fire_timestamp_seconds",
     "The instant of the schedule's last fire (Unix time); no series before its first."),
    ("runnerq_schedule_fires", "Activities the schedule's fires have enqueued."),
    ("runnerq_schedule_missed_fires",
     "Fire instants the missed-fire policy dropped (all workers down, the schedule "
     "paused)."),
    ("runnerq_schedule_skipped_fires",
     "Fire instants the overlap policy skipped (the previous fire's activity still "
     "unfinished)."),
    ("runnerq_schedule_buffered",
     "1 when a fire is held back until the previous fire's activity ends (overlap "
     "buffer_one), else 0."),
    ("runnerq_schedule_paused", "1 when the schedule is paused, else 0."),
    ("runnerq_schedule_malformed",
     "1 when the schedule is malformed or set aside (not firing), else 0."),
)


# The flow limits' families (docs/design.md, "Flow control"): a series per limited type.
LIMIT_FAMILIES = (
    ("runnerq_limit_slots_in_use", "Slots taken under the activity type's flow limit: its "
     "activities running now across the fleet (docs/design.md, \"Flow control\")."),
    ("runnerq_limit_concurrency", "The activity type's concurrency limit (limit set "
     "--concurrency); no series when it has none."),
    ("runnerq_limit_held_back", "Pending activities waiting on the flow limit: all of the "
     "type's while it is full (concurrency or rate), else those of its keys at their own "
     "limit."),
)


def _limit_families() -> tuple[GaugeMetricFamily, ...]:
    return tuple(GaugeMetricFamily(name, text, labels=["queue", "type"])
                 for name, text in LIMIT_FAMILIES)


def _schedule_families() -> tuple[GaugeMetricFamily, ...]:
    """The schedules' families: a series per schedule of each queue (docs/cli.md)."""
    return tuple(GaugeMetricFamily(name, text, labels=["queue", "schedule"])
                 for name, text in SCHEDULE_FAMILIES)


def _add_sample(out: _Families, sample: MetricsSample, window: str) -> None:
    """One queue's sample into the families, each series labelled with its queue. Apart
    from `families` so that the loop over queues stays one line and this mapping from
    sample fields to series can be read on its own."""
    queue = sample["queue"]
    for (status, priority, kind), count in _activity_counts(sample).items():
        out.activities.add_metric([queue, status, priority, kind], count)
    for status, count in sample["estimated"].items():
        out.estimated.add_metric([queue, status], count)
    out.malformed.add_metric([queue], sample["malformed"])
    out.oldest.add_metric([queue], float(sample["oldest_pending_age_seconds"] or 0.0))
    for status, count in sample["finished"].items():
        out.finished.add_metric([queue, status, window], count)
    latency = sample["latency"]
    for metric, measure, summary in ((out.waits, "queue_wait", latency["queue_wait_seconds"]),
                                     (out.runs, "run", latency["run_seconds"])):
        for p, value in percentiles(summary).items():
            if value is not None:
                metric.add_metric([queue, window, QUANTILES[p]], float(value))
        out.sampled.add_metric([queue, window, measure], float(summary["count"]))
    out.workers.add_metric([queue, "live"], sample["workers"]["live"])
    out.workers.add_metric([queue, "stale"], sample["workers"]["stale"])
    out.in_flight.add_metric([queue], sample["workers"]["in_flight"])
    out.paused.add_metric([queue], 1.0 if sample["paused"] else 0.0)
    for kind in sample["known_types"]:
        out.type_paused.add_metric([queue, kind],
                                   1.0 if kind in sample["paused_types"] else 0.0)
    for row in sample.get("schedules") or []:
        labels = [queue, row["name"]]
        for family, value in ((out.schedule_next, row["next_fire_timestamp"]),
                              (out.schedule_last, row["last_fire_timestamp"])):
            if value is not None:
                family.add_metric(labels, value)
        out.schedule_fires.add_metric(labels, row["fires"])
        out.schedule_missed.add_metric(labels, row["missed_fires"])
        out.schedule_skipped.add_metric(labels, row.get("skipped_fires", 0))
        out.schedule_buffered.add_metric(labels, 1.0 if row.get("buffered") else 0.0)
        out.schedule_paused.add_metric(labels, 1.0 if row["paused"] else 0.0)
        out.schedule_malformed.add_metric(labels, 1.0 if row["problem"] else 0.0)
    for row in sample.get("limits") or []:
        labels = [queue, row["activity_type"]]
        out.limit_in_use.add_metric(labels, row["in_use"])
        if row["concurrency"]:
            out.limit_concurrency.add_metric(labels, row["concurrency"])
        out.limit_held_back.add_metric(labels, row["held_back"])


def hint_fallbacks(samples: list[MetricsSample]) -> GaugeMetricFamily:
    """Reads this process ran without their hint since it started, by index: the server
    refused it (the index is missing; backend/store/hints.py). A gauge like the others
    (it only grows while the process runs, and starts again at 0 with it)."""
    family = GaugeMetricFamily(
        "runnerq_hint_fallbacks", "Reads this process ran without their index hint because "
        "the server refused it (the index is missing: run init-indexes), by index, since "
        "this process started.",
        labels=["index"])
    counts: dict[str, int] = {}
    for sample in samples:  # process-wide: the same in every sample
        counts.update(sample.get("hint_fallbacks") or {})
    for index, count in sorted(counts.items()):
        family.add_metric([index], count)
    return family


def _scrape_families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    up = GaugeMetricFamily(
        "runnerq_scrape_success",
        "1 when the last query of the queue succeeded, else 0 (queue=\"\": the list of "
        "queues could not be read).", labels=["queue"])
    took = GaugeMetricFamily("runnerq_scrape_duration_seconds",
                             "Time the last query of the queues took.")
    return up, took


class QueueCollector(Collector):
    """Collects the queues' samples at most once per `min_interval`; errors become a gauge.

    `queues()` names the queues of each scrape (re-read every time, so
    `--all-queues` sees queues created later); `backend_for(queue)` gives
    their backends.
    """

    def __init__(self, queues: Callable[[], list[str]], backend_for: Callable[[str], RunnerQ],
                 *, min_interval: float = 5.0, window_seconds: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_error: Callable[[str], None] | None = None,
                 outage: OutageWatch | None = None) -> None:
        self._queues = queues
        # A server away (domain/outage.py): told once per failed scrape as an outage
        # (since when, retrying at the next scrape), and when it is back; not as errors.
        self._outage = outage
        self._backend_for = backend_for
        self.min_interval = min_interval
        self.window_seconds = window_seconds
        self._clock = clock
        self._on_error = on_error
        self._lock = threading.Lock()
        self._taken_at: float | None = None
        self._cached: list[Metric] = []
        # Types seen in an earlier scrape, per queue: their series stay, at 0, after the
        # type's last activity is gone (a vanished series breaks `== 0` alerts).
        self._known: dict[str, set[str]] = {}
        self.collections = 0  # how many times the server was queried (tests, logs)

    def _take(self) -> list[Metric]:
        """One query per queue; a queue that fails is reported alone (scrape_success 0)."""
        started = time.perf_counter()
        up, took = _scrape_families()
        samples = []
        away: list[Exception] = []
        try:
            names = self._queues()
        except Exception as exc:
            self._report(exc, away=away)
            names = []
            up.add_metric([""], 0.0)
        for name in names:
            try:
                backend = self._backend_for(name)
                sample = backend.inspector.metrics_sample(window_seconds=self.window_seconds)
                sample["schedules"] = backend.schedule_views.series()  # one more read
                # One read of the limit documents, a count per limit holding work back.
                sample["limits"] = [i.brief() for i in backend.limits.summary()]
                known = self._known.setdefault(name, set())
                known.update(sample["known_types"])
                sample["known_types"] = sorted(known)  # a fresh dict: ours to change
                samples.append(sample)
            except Exception as exc:
                self._report(exc, name, away=away)
                up.add_metric([name], 0.0)
            else:
                up.add_metric([name], 1.0)
        if self._outage is not None:
            if away:
                self._outage.failed(away[0])
            elif samples:  # a queue was read: the server answered
                self._outage.succeeded()
        self.collections += 1
        took.add_metric([], time.perf_counter() - started)
        return [*families(samples), up, took, hint_fallbacks(samples)]

    def _report(self, exc: Exception, queue: str | None = None, *,
                away: list[Exception] | None = None) -> None:
        if self._outage is not None and away is not None and self._outage.answered \
                and is_away(exc):
            away.append(exc)  # the scrape's outage, told once (in _take)
            return
        if self._on_error is not None:
            from runnerq_cli.literal import literal
            from runnerq_cli.redaction import redact_uri

            where = f"queue {literal(queue)}: " if queue is not None else ""
            self._on_error(where + literal(redact_uri(f"{type(exc).__name__}: {exc}"))[:300])

    def describe(self) -> Iterator[Metric]:
        """The families' names, without querying: lets `GET /metrics?name[]=...` pick them."""
        yield from families([])
        yield from _scrape_families()
        yield hint_fallbacks([])

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # concurrent scrapes wait for one query, then share it
            now = self._clock()
            if self._taken_at is None or now - self._taken_at >= self.min_interval:
                self._cached = self._take()
                self._taken_at = self._clock()
            cached = list(self._cached)
        yield from cached


def registry_for(collector: Collector) -> CollectorRegistry:
    """A registry holding only `collector` (not the process/platform defaults)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(samples: Iterable[MetricsSample], *, openmetrics: bool = False) -> str:
    """The samples in the Prometheus text exposition format (0.0.4: node_exporter's
    textfile collector reads it), or in OpenMetrics 1.0 text (ends with `# EOF`), the two
    formats `metrics serve` answers by the scraper's Accept header."""
    from prometheus_client.exposition import generate_latest as prometheus_text
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_text

    metric_list = families(list(samples))

    class _Fixed(Collector):
        def collect(self) -> Iterator[Metric]:
            yield from metric_list

    registry = registry_for(_Fixed())
    # prometheus_client's OpenMetrics generator has no annotations
    text: bytes = (openmetrics_text(registry)  # type: ignore[no-untyped-call]
                   if openmetrics else prometheus_text(registry))
    return text.decode()


def serve(collector: Collector, host: str, port: int) -> tuple[Any, str]:
    """Serve `collector` on http://host:port/metrics in a daemon thread; (server, url).

    Raises OSError when the address cannot be bound (in use, no such host).
    """
    return serve_registry(registry_for(collector), host, port)


def serve_registry(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, str]:
    """Serve `registry` on http://host:port/metrics in a daemon thread; (server, url). It
    answers the Prometheus text format, or OpenMetrics when the scraper's Accept header
    asks for it (prometheus_client's negotiation). Raises OSError as `serve` does."""
    from prometheus_client.exposition import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry)
    bound_host, bound_port = (str(part) for part in server.server_address[:2])
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return server, f"http://{shown}:{bound_port}/metrics"


def listen(registry: CollectorRegistry, host: str, port: int, *,
           host_flag: str = "--host") -> tuple[Any, str]:
    """`serve_registry`, its failures as the CLI's errors: the address in use is
    AddressInUse (exit 15), a host that is no address (or an empty one, which would
    listen on every interface unasked) InvalidArgument (exit 2), one line each."""
    import errno

    from runnerq_cli.errors import AddressInUse, InvalidArgument

    if not host.strip():
        raise InvalidArgument(f"{host_flag} must name an address (0.0.0.0 for every "
                              "interface)")
    try:
        return serve_registry(registry, host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(f"cannot listen on {host}:{port}: the address is in use") \
                from None
        raise InvalidArgument(f"cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}") from None


def worker_registry() -> tuple[CollectorRegistry, PrometheusMetrics]:
    """`worker --metrics-port`'s registry: the worker's metrics (worker/metrics.py) and the
    process's own (CPU, memory, open files, the platform, garbage collection)."""
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

    from runnerq_cli.worker.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry, PrometheusMetrics(registry)


def log_error(message: str) -> None:
    """A failed scrape, on stderr (the endpoint answers runnerq_scrape_success 0)."""
    sys.stderr.write(f"warning: metrics query failed: {message}\n")
    sys.stderr.flush()

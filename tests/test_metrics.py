"""Prometheus metrics: `stats -o prometheus|openmetrics` and `metrics serve`, read with
prometheus_client."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.exposition import QueueCollector, registry_for
from tests.helpers import default_signals
from tests.helpers import metric_value as value
from tests.helpers import metrics_parsed as parse
from tests.waiting import LineReader

FAMILIES = {
    "runnerq_activities": "gauge",
    "runnerq_activities_estimated": "gauge",
    "runnerq_malformed_documents": "gauge",
    "runnerq_oldest_pending_age_seconds": "gauge",
    "runnerq_finished_activities": "gauge",
    "runnerq_queue_wait_seconds": "gauge",
    "runnerq_run_seconds": "gauge",
    "runnerq_latency_sample_size": "gauge",
    "runnerq_workers": "gauge",
    "runnerq_in_flight": "gauge",
    "runnerq_queue_paused": "gauge",
    "runnerq_type_paused": "gauge",
    # a series per schedule (tests/test_schedule_views.py)
    "runnerq_schedule_next_fire_timestamp_seconds": "gauge",
    "runnerq_schedule_last_fire_timestamp_seconds": "gauge",
    "runnerq_schedule_fires": "gauge",
    "runnerq_schedule_missed_fires": "gauge",
    "runnerq_schedule_skipped_fires": "gauge",
    "runnerq_schedule_buffered": "gauge",
    "runnerq_schedule_paused": "gauge",
    "runnerq_schedule_malformed": "gauge",
    "runnerq_limit_slots_in_use": "gauge",
    "runnerq_limit_concurrency": "gauge",
    "runnerq_limit_held_back": "gauge",
}



@pytest.fixture
def mix(queue: RunnerQ, clock):
    """2 pending (a high, b low), 1 running, 1 completed and 1 dead-lettered (each waited
    2 s and ran 3 s), a live worker with 1 in flight and a stale one."""
    queue.enqueue("a", {}, priority="high")
    queue.enqueue("b", {}, priority="critical", max_retries=1)
    queue.enqueue("a", {}, priority="normal")
    clock.advance(2)
    claims = {c.activity.priority: c for c in queue.dequeue("w1", limit=3)}
    clock.advance(3)
    queue.ack_success(claims[3], "ok")
    queue.ack_failure(claims[4], "boom")
    queue.enqueue("a", {}, priority="high")
    queue.enqueue("b", {}, priority="low")
    clock.advance(-120)
    queue.registry.register_worker("w-stale")
    clock.advance(120)
    queue.registry.register_worker("w1", types=["a", "b"])
    queue.registry.heartbeat_worker("w1", in_flight=1, counters={})
    return queue


def test_stats_prometheus_parsed_by_prometheus(mix, run_cli) -> None:
    res = run_cli("stats", "-o", "prometheus")
    assert res.code == 0, res.stderr
    assert "# EOF" not in res.stdout  # the 0.0.4 text node_exporter's textfile collector reads
    for name, kind in FAMILIES.items():
        assert f"# HELP {name} " in res.stdout
        assert f"# TYPE {name} {kind}" in res.stdout
    families = parse(res.stdout)
    assert {n: f.type for n, f in families.items()} == FAMILIES
    acts = families["runnerq_activities"]
    assert value(acts, queue="tests", status="pending", priority="high", type="a") == 1
    assert value(acts, queue="tests", status="pending", priority="low", type="b") == 1
    assert value(acts, status="processing", priority="normal", type="a") == 1
    assert value(acts, status="dead_letter", priority="critical", type="b") == 1
    # A small queue: completed ones counted exactly too (metrics.EXACT_COMPLETED_UP_TO).
    assert value(acts, status="completed", priority="high", type="a") == 1
    assert value(families["runnerq_activities_estimated"], queue="tests",
                 status="completed") == 1
    assert value(families["runnerq_malformed_documents"], queue="tests") == 0
    assert value(families["runnerq_oldest_pending_age_seconds"], queue="tests") >= 0
    finished = families["runnerq_finished_activities"]
    assert value(finished, status="completed", window_seconds="900") == 1
    assert value(finished, status="dead_letter") == 1
    assert value(finished, status="failed") == 0
    waits = families["runnerq_queue_wait_seconds"]
    assert value(waits, quantile="0.5") == 2.0 and value(waits, quantile="0.99") == 2.0
    assert value(families["runnerq_latency_sample_size"], measure="queue_wait") == 2.0
    assert value(families["runnerq_run_seconds"], quantile="0.95") == 3.0
    workers = families["runnerq_workers"]
    assert value(workers, state="live") == 1 and value(workers, state="stale") == 1
    assert value(families["runnerq_in_flight"], queue="tests") == 1
    assert value(families["runnerq_queue_paused"], queue="tests") == 0


def test_stats_openmetrics_is_openmetrics(mix, run_cli) -> None:
    """`-o openmetrics` is what its name says (it printed the Prometheus text, with no
    `# EOF`): the OpenMetrics parser reads it, the same families and values."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as parse_openmetrics,
    )

    res = run_cli("stats", "-o", "openmetrics")
    assert res.code == 0, res.stderr
    assert res.stdout.endswith("# EOF\n")
    om = {f.name: f for f in parse_openmetrics(res.stdout)}
    prom = parse(run_cli("stats", "-o", "prometheus").stdout)
    assert {n: f.type for n, f in om.items()} == {n: f.type for n, f in prom.items()}
    acts = om["runnerq_activities"]
    assert value(acts, queue="tests", status="pending", priority="high", type="a") == 1


def test_stats_openmetrics_with_check(mix, run_cli) -> None:
    res = run_cli("stats", "-o", "openmetrics", "--check", "dead_letter == 0")
    assert res.code == ExitCode.CHECK_FAILED
    assert "# TYPE runnerq_activities gauge" in res.stdout
    assert res.stderr.startswith("error: check failed: dead_letter == 0")


def test_collector_caches_between_scrapes(queue: RunnerQ) -> None:
    """Many scrapes within --min-interval cost one set of queries."""
    from prometheus_client.exposition import generate_latest

    now = [100.0]
    collector = QueueCollector(lambda: ["tests"], queue.for_queue, min_interval=5.0,
                               clock=lambda: now[0])
    registry = registry_for(collector)
    first = parse(generate_latest(registry).decode())
    assert collector.collections == 1
    queue.enqueue("job", {})
    for _ in range(3):
        again = parse(generate_latest(registry).decode())
    assert collector.collections == 1
    assert not again["runnerq_activities"].samples  # the cached answer, from before
    assert first["runnerq_scrape_success"].samples[0].value == 1
    now[0] += 5.0
    fresh = parse(generate_latest(registry).decode())
    assert collector.collections == 2
    assert value(fresh["runnerq_activities"], status="pending", priority="normal",
                 type="job") == 1


def test_collector_failure_is_a_gauge_not_a_crash(queue: RunnerQ) -> None:
    from prometheus_client.exposition import generate_latest

    errors: list[str] = []

    def broken(_name: str) -> RunnerQ:
        raise RuntimeError("server went away mongodb://u:secret@host")

    collector = QueueCollector(lambda: ["tests"], broken, min_interval=0, on_error=errors.append)
    families = parse(generate_latest(registry_for(collector)).decode())
    assert families["runnerq_scrape_success"].samples[0].value == 0
    assert errors and "secret" not in errors[0]


def test_all_queues_rediscovered(queue: RunnerQ) -> None:
    from prometheus_client.exposition import generate_latest

    collector = QueueCollector(queue.diagnosis.discover_queues, queue.for_queue, min_interval=0)
    registry = registry_for(collector)
    first = parse(generate_latest(registry).decode())
    assert {s.labels["queue"] for s in first["runnerq_workers"].samples} == {"tests"}
    queue.for_queue("later").maintenance.init_indexes()
    second = parse(generate_latest(registry).decode())
    assert {s.labels["queue"] for s in second["runnerq_workers"].samples} == {"tests", "later"}


# ------------------------------------------------------------- metrics serve


class Served:
    """`metrics serve` in a subprocess; its URL read from its first line, with a deadline."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "metrics", "serve", "--port", "0", *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
        try:
            first = LineReader(self.proc.stdout).readline(timeout=60)
        except AssertionError:
            first = ""
        if not first.strip():
            self.proc.kill()
            raise AssertionError(f"metrics serve did not start: {self.proc.stderr.read()}")
        self.first_line = first.strip()
        self.url = self.first_line.rsplit(" ", 1)[-1]

    def get(self, accept: str | None = None) -> tuple[int, str, str]:
        request = urllib.request.Request(self.url, headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.headers.get("Content-Type"), answer.read().decode()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc.kill()


def test_metrics_serve_scraped_over_http(mix, cli_env) -> None:
    served = Served(cli_env, "--min-interval", "1h")
    try:
        assert served.first_line.startswith("serving metrics of tests on http://127.0.0.1:")
        status, content_type, body = served.get()
        assert status == 200 and content_type.startswith("text/plain")
        families = parse(body)
        assert set(FAMILIES) <= set(families)
        assert value(families["runnerq_activities"], status="pending", priority="high",
                     type="a") == 1
        assert families["runnerq_scrape_success"].samples[0].value == 1
        # Within --min-interval a second scrape is the first one's answer: no new query.
        mix.enqueue("a", {}, priority="high")
        assert parse(served.get()[2])["runnerq_activities"].samples == \
            families["runnerq_activities"].samples
        # Prometheus asks for OpenMetrics first: the same metrics, in that format.
        from prometheus_client.openmetrics.parser import (
            text_string_to_metric_families as parse_openmetrics,
        )

        _, content_type, body = served.get("application/openmetrics-text; version=1.0.0")
        assert content_type.startswith("application/openmetrics-text")
        assert body.endswith("# EOF\n")
        om = {f.name: f for f in parse_openmetrics(body)}
        assert {n: om[n].type for n in FAMILIES} == FAMILIES
        assert value(om["runnerq_activities"], status="pending", priority="high",
                     type="a") == 1
    finally:
        code = served.stop()
    assert code == 0


def test_metrics_serve_all_queues(queue: RunnerQ, cli_env) -> None:
    queue.for_queue("second").maintenance.init_indexes()
    queue.for_queue("second").enqueue("x", {})
    served = Served(cli_env, "--all-queues", "--min-interval", "0s")
    try:
        assert served.first_line.startswith("serving metrics of every queue on ")
        families = parse(served.get()[2])
        assert {s.labels["queue"] for s in families["runnerq_queue_paused"].samples} == \
            {"tests", "second"}
        assert value(families["runnerq_activities"], queue="second", status="pending",
                     priority="normal", type="x") == 1
    finally:
        assert served.stop() == 0


@pytest.mark.parametrize("port", ["70000", "-1", "abc", "9464.5"])
def test_metrics_serve_bad_port(run_cli, port: str) -> None:
    res = run_cli("metrics", "serve", "--port", port)
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert "--port" in res.stderr and res.stdout == ""


def test_metrics_serve_port_in_use(queue: RunnerQ, run_cli_subprocess) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_cli_subprocess("metrics", "serve", "--port", str(port), timeout=60)
    assert res.code == ExitCode.ADDRESS_IN_USE == 15
    assert res.stderr == f"error: cannot listen on 127.0.0.1:{port}: the address is in use\n"
    assert res.stdout == ""


def test_metrics_serve_bad_input(queue: RunnerQ, run_cli) -> None:
    res = run_cli("metrics", "serve", "--queue", "nope")
    assert res.code == ExitCode.NOT_FOUND
    assert res.stderr == ("error: queue 'nope' not found in database "
                          f"'{queue.settings.database}' (queues there: tests)\n")
    res = run_cli("metrics", "serve", "--queue", "tests", "--all-queues")
    assert res.code == ExitCode.USAGE and res.stderr.startswith("error: give --queue or")
    res = run_cli("metrics", "serve", "--min-interval", "soon")
    assert res.code == ExitCode.USAGE and res.stderr.startswith("error: ")
    res = run_cli("metrics", "serve", "--host", "no-such-host.invalid", "--port", "0")
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: cannot listen on no-such-host.invalid:0")


def test_metrics_serve_unreachable_server(run_cli) -> None:
    res = run_cli("metrics", "serve", env={
        "RUNNERQ_MONGO_URI": "mongodb://u:secret@127.0.0.1:1",
        "RUNNERQ_SERVER_SELECTION_TIMEOUT": "300ms"})
    assert res.code == ExitCode.UNAVAILABLE
    assert "secret" not in res.stderr and len(res.stderr.strip().splitlines()) == 1



# ------------------------------------------------------ Prometheus conventions (issue 25, 5)


def test_only_gauges_and_zero_series_kept_for_known_types(queue: RunnerQ) -> None:
    """No counter or summary whose count could go down; a type's series stay, at 0,
    once its last activity is gone; a paused type is visible per type."""
    from prometheus_client.exposition import generate_latest

    collector = QueueCollector(lambda: ["tests"], queue.for_queue, min_interval=0)
    registry = registry_for(collector)
    aid = queue.enqueue("mail", {}, priority="high").activity_id
    first = parse(generate_latest(registry).decode())
    assert {f.type for f in first.values()} == {"gauge"}
    acts = first["runnerq_activities"]
    assert value(acts, status="pending", priority="high", type="mail") == 1
    assert value(acts, status="dead_letter", priority="low", type="mail") == 0  # kept at 0
    queue.operator.cancel(aid)
    queue.operator.delete(aid)
    queue.control.pause(types=["resize"], actor="ops")
    after = parse(generate_latest(registry).decode())
    acts = after["runnerq_activities"]
    assert value(acts, status="pending", priority="high", type="mail") == 0  # not vanished
    paused = after["runnerq_type_paused"]
    assert value(paused, type="resize") == 1 and value(paused, type="mail") == 0
    assert value(after["runnerq_queue_paused"], queue="tests") == 0  # not the whole queue
    text = generate_latest(registry).decode()
    assert "_total" not in text and "# TYPE runnerq_run_seconds gauge" in text

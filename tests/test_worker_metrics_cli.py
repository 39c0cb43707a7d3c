"""`worker --metrics-port`: a worker process serving its metrics, scraped over HTTP as
Prometheus does, and the flags' bad input."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from runnerq_cli.cli.exits import ExitCode
from tests.helpers import default_signals
from tests.helpers import metric_value as value
from tests.helpers import metrics_parsed as parse
from tests.waiting import LineReader, wait_until

ROOT = Path(__file__).resolve().parent.parent


def scrape(url: str, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers.get("Content-Type"), answer.read().decode()


def totals(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every counter sample of a scrape, by name and labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in parse(body).values() if f.type == "counter"
            for s in f.samples if s.name.endswith("_total")}


def completed(url: str) -> float:
    family = parse(scrape(url)[1]).get("runnerq_activity_completed")
    return sum(s.value for s in family.samples if s.name.endswith("_total")) if family else 0.0


@pytest.mark.slow
def test_a_worker_serves_its_counters_moving_with_the_work(backend, cli_env) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runnerq_cli", "worker", "--app", "tests.worker_handlers",
         "--metrics-port", "0", "--log-format", "json", "--poll-interval", "0.2"],
        cwd=ROOT, env={**cli_env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        lines = LineReader(proc.stderr)
        url = ""
        while not url:
            record = json.loads(lines.readline(timeout=60) or "{}")
            assert record, "the worker ended before serving its metrics"
            url = record.get("url", "") if record.get("msg") == "serving metrics" else ""
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        content_type, body = scrape(url)
        assert content_type.startswith("text/plain")
        first = parse(body)
        assert first["runnerq_activity_completed"].type == "counter"
        assert "process_cpu_seconds" in first and "python_info" in first  # process metrics
        for _ in range(3):
            backend.enqueue("echo", {})
        wait_until(lambda: completed(url) == 3, timeout=60, message="3 completions counted")
        backend.enqueue("echo", {})
        wait_until(lambda: completed(url) == 4, timeout=60, message="a 4th counted")
        after = scrape(url)[1]
        got = parse(after)
        before, now = totals(body), totals(after)
        assert all(now[key] >= count for key, count in before.items())  # only ever up
        assert value(got["runnerq_activity_started"], queue="tests", activity_type="echo") == 4
        assert value(got["runnerq_activity_execution_seconds"], queue="tests",
                     activity_type="echo", le="+Inf") == 4
        # OpenMetrics for a scraper that asks for it (Prometheus does), the same counters.
        from prometheus_client.openmetrics.parser import text_string_to_metric_families

        content_type, body = scrape(url, "application/openmetrics-text; version=1.0.0")
        assert content_type.startswith("application/openmetrics-text")
        assert body.endswith("# EOF\n")
        om = {f.name: f for f in text_string_to_metric_families(body)}
        assert [s.value for s in om["runnerq_activity_completed"].samples
                if s.name == "runnerq_activity_completed_total"] == [4]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_one_line_exit_2(backend, run_cli, port: str) -> None:
    res = run_cli("worker", "--app", "tests.worker_handlers", "--metrics-port", port)
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert "--metrics-port" in res.stderr
    assert backend.registry.list_workers() == []


def test_a_port_taken_is_exit_15_before_connecting(backend, run_cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_cli("worker", "--app", "tests.worker_handlers", "--metrics-port", str(port))
    assert res.code == ExitCode.ADDRESS_IN_USE == 15
    assert res.stderr == f"error: cannot listen on 127.0.0.1:{port}: the address is in use\n"
    assert backend.registry.list_workers() == []  # it never started


@pytest.mark.parametrize("host", ["no-such-host.invalid", "300.1.2.3", " "])
def test_a_host_that_is_no_address_is_exit_2(backend, run_cli, host: str) -> None:
    res = run_cli("worker", "--app", "tests.worker_handlers", "--metrics-port", "0",
                  "--metrics-host", host)
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert backend.registry.list_workers() == []


def test_metrics_host_needs_a_port(run_cli) -> None:
    res = run_cli("worker", "--app", "tests.worker_handlers", "--metrics-host", "0.0.0.0")
    assert res.code == ExitCode.USAGE
    assert res.stderr == "error: --metrics-host needs --metrics-port\n"

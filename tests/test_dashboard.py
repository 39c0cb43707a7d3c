"""The Grafana dashboard (docs/grafana/runnerq-mongo.json) and the alert rules of
docs/diagnose.md name only metrics that exist: the worker's (`worker --metrics-port`,
process metrics included) or `metrics serve`'s."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from runnerq_cli.cli.exposition import QueueCollector, worker_registry

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "runnerq-mongo.json"
DIAGNOSE = ROOT / "docs" / "diagnose.md"
# What each family type's samples are called (prometheus_client's exposition).
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count",
                                                             "_created"),
            "gauge": ("",), "summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}
METRIC = re.compile(r"\b((?:runnerq|process|python)_[a-zA-Z0-9_]*)")


def exposed() -> set[str]:
    """Every sample name a worker's scrape or `metrics serve`'s can carry."""
    registry, sink = worker_registry()
    sink.track("q", lambda: 0, 1)
    families = [*registry.collect(), *QueueCollector(list, None).describe()]  # type: ignore[arg-type]
    names = {f.name + suffix for f in families for suffix in SUFFIXES[f.type]}
    names |= {s.name for f in families for s in f.samples}
    return names


def names_in(expr: str) -> set[str]:
    return set(METRIC.findall(re.sub(r'"[^"]*"', '""', expr)))


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [v["query"]["query"] for v in board["templating"]["list"]
                if isinstance(v.get("query"), dict)]
    return queries


def alert_rules() -> list[dict]:
    text = DIAGNOSE.read_text()
    block = re.search(r"### Alert rules.*?```yaml\n(.*?)```", text, re.S)
    assert block, "docs/diagnose.md has no alert rules block"
    groups = yaml.safe_load(block.group(1))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_every_dashboard_query_names_metrics_that_exist() -> None:
    known = exposed()
    queries = dashboard_queries()
    assert len(queries) >= 20
    for query in queries:
        used = names_in(query)
        assert used, f"a query that names no metric: {query}"
        assert used <= known, f"{sorted(used - known)} in {query}"


def test_every_alert_rule_names_metrics_that_exist() -> None:
    known = exposed()
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= {
        "RunnerQFailureRatioHigh", "RunnerQQueueLatencyP95High", "RunnerQWorkersSaturated",
        "RunnerQBackendErrors"}
    for rule in rules:
        used = names_in(rule["expr"])
        assert used and used <= known, (rule["alert"], sorted(used - known))


def test_the_dashboard_is_one_grafana_can_import() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert {"type", "title", "gridPos"} <= set(panel)
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs))
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "queue",
                                                                "worker_job"}


def test_the_check_itself_catches_a_wrong_name() -> None:
    known = exposed()
    assert "runnerq_activity_completed_total" in known
    assert "runnerq_activity_queue_latency_seconds_bucket" in known
    assert "runnerq_oldest_pending_age_seconds" in known  # metrics serve's
    assert "process_cpu_seconds_total" in known
    assert not names_in('rate(runnerq_activity_complete_total[5m])') <= known
    assert names_in('x{status="runnerq_not_a_metric"}') == set()  # label values are not names

"""Flow limits seen everywhere (issue 40, point 5): `stats` and `queues` show the slots in
use and the work held back, `list pending --key`, Prometheus, `doctor`, the console.
Each as a user runs it, on a queue whose limits are full."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.flow import make_limits
from runnerq_cli.backend.domain.specs import ActivitySpec


@pytest.fixture
def held(settings, cli_env) -> RunnerQ:
    """charge: concurrency 2, both slots taken, 3 more pending (held back);
    mail: 1 per key, tenant-a's one running and 2 more held, tenant-b's free."""
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    rq.limits.set(make_limits("charge", concurrency=2))
    rq.limits.set(make_limits("mail", key_limit=1))
    for i in range(5):
        rq.enqueue(ActivitySpec("charge", {"i": i}))
    for key, n in (("tenant-a", 3), ("tenant-b", 1)):
        for i in range(n):
            rq.enqueue(ActivitySpec("mail", {"i": i}, key=key))
    assert len(rq.dequeue("w1", types=["charge"], limit=5)) == 2
    assert len(rq.dequeue("w1", types=["mail"], limit=1)) == 1  # tenant-a's turn first
    return rq


def test_the_summary_counts_what_each_limit_holds_back(held: RunnerQ) -> None:
    rows = {i.limits.activity_type: i for i in held.limits.summary()}
    assert rows["charge"].held_back == 3 and len(rows["charge"].holders) == 2
    assert rows["charge"].full is not None and "2 of 2 running" in rows["charge"].full
    # mail is not full as a type: only tenant-a's key is, with 2 more pending
    assert rows["mail"].full is None and rows["mail"].held_back == 2


def test_stats_shows_slots_in_use_and_held_back(held: RunnerQ, run_cli) -> None:
    text = run_cli("stats", env={"COLUMNS": "80"})
    assert text.code == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if ln.startswith("limits"))
    assert "charge 2/2 in use, 3 held back; mail 1 in use, 2 held back" in line
    assert all(len(ln) <= 80 for ln in text.stdout.splitlines())
    data = json.loads(run_cli("stats", "-o", "json").stdout)
    by_type = {row["activity_type"]: row for row in data["limits"]}
    assert by_type["charge"]["in_use"] == 2 and by_type["charge"]["held_back"] == 3
    assert by_type["charge"]["concurrency"] == 2 and "holders" not in by_type["charge"]
    assert by_type["mail"]["busiest_keys"] == {"tenant-a": 1}


def test_stats_without_limits_says_nothing_of_them(queue: RunnerQ, run_cli) -> None:
    queue.enqueue("plain", {})
    out = run_cli("stats")
    assert out.code == 0 and "limits" not in out.stdout
    assert json.loads(run_cli("stats", "-o", "json").stdout)["limits"] == []


def test_queues_shows_slots_and_held_back(held: RunnerQ, run_cli) -> None:
    text = run_cli("queues", env={"COLUMNS": "200"})
    assert text.code == 0, text.stderr
    assert "limits" in text.stdout.splitlines()[0]
    assert "3 in use, 5 held" in text.stdout
    narrow = run_cli("queues", env={"COLUMNS": "80"}).stdout.splitlines()
    assert all(len(ln) <= 80 for ln in narrow)
    data = json.loads(run_cli("queues", "-o", "json").stdout)
    (row,) = data["queues"]
    assert sum(r["held_back"] for r in row["limits"]) == 5


def test_list_pending_by_key(held: RunnerQ, run_cli) -> None:
    out = run_cli("list", "pending", "--type", "mail", "--key", "tenant-a", "-o", "json")
    assert out.code == 0, out.stderr
    items = json.loads(out.stdout)["items"]
    assert len(items) == 2 and {i["activity_type"] for i in items} == {"mail"}
    assert {i["flow_key"] for i in items} == {"tenant-a"}  # each says its key
    plain = json.loads(run_cli("list", "pending", "--type", "charge", "-o", "json").stdout)
    assert plain["items"] and all("flow_key" not in i for i in plain["items"])
    one = run_cli("enqueue", "mail", "--key", "tenant-c", "-o", "json")
    assert one.code == 0 and json.loads(one.stdout)["flow_key"] == "tenant-c", one.stderr
    assert len(json.loads(run_cli("list", "pending", "--key", "tenant-b",
                                  "-o", "json").stdout)["items"]) == 1
    assert json.loads(run_cli("list", "pending", "--key", "nobody",
                              "-o", "json").stdout)["items"] == []
    bad = run_cli("list", "pending", "--key", "x" * 201)
    assert bad.code == 2 and len(bad.stderr.splitlines()) == 1 and "--key" in bad.stderr


def test_prometheus_exposes_slots_and_held_back(held: RunnerQ, run_cli) -> None:
    text = run_cli("stats", "-o", "prometheus").stdout
    series = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("runnerq_limit")}
    charge, mail = '{queue="tests",type="charge"}', '{queue="tests",type="mail"}'
    assert series[f"runnerq_limit_slots_in_use{charge}"] == 2
    assert series[f"runnerq_limit_concurrency{charge}"] == 2
    assert series[f"runnerq_limit_held_back{charge}"] == 3
    assert series[f"runnerq_limit_held_back{mail}"] == 2
    assert f"runnerq_limit_concurrency{mail}" not in series  # a per-key limit only


def test_a_worker_counts_the_starts_its_limits_put_off(held: RunnerQ) -> None:
    """`runnerq_activity_throttled_total`: a worker's claims that found the limit full."""
    from prometheus_client import CollectorRegistry

    from runnerq_cli.worker.engine import Worker
    from runnerq_cli.worker.handlers import HandlerRegistry
    from runnerq_cli.worker.metrics import PrometheusMetrics

    handlers = HandlerRegistry()
    handlers.handler("charge")(lambda payload: None)
    sink = PrometheusMetrics(CollectorRegistry())
    worker = Worker(held, handlers, burst=True, types=["charge"], metrics=sink)
    held.context.flow.changed()
    worker.run(install_signals=False)  # burst: charge is full (2 of 2 held by w1): nothing starts
    throttled = sink.registry.get_sample_value(
        "runnerq_activity_throttled_total", {"queue": "tests", "activity_type": "charge"})
    assert throttled is not None and throttled >= 1


def _doctor_limits(run_cli) -> dict[str, object]:
    data = json.loads(run_cli("doctor", "-o", "json").stdout)
    checks = data["checks"] if isinstance(data, dict) else data
    return next(c for c in checks if c["name"] == "limits")


def test_doctor_sees_a_limit_no_claimer_can_honour(held: RunnerQ, run_cli) -> None:
    assert _doctor_limits(run_cli)["status"] == "ok"
    held.context.limits.update_one({"_id": "charge"}, {"$set": {"concurrency": 0}})
    check = _doctor_limits(run_cli)
    assert check["status"] == "fail" and "charge: concurrency 0 stored" in check["message"]
    text = run_cli("doctor", env={"COLUMNS": "80"})
    assert text.code != 0 and "no claimer can honour it" in text.stdout


def test_doctor_sees_slots_held_past_their_leases(held: RunnerQ, run_cli) -> None:
    """A worker died after its slots' claims ended but before their release: the slots
    of key tenant-a stay taken until a claim of mail repairs them."""
    held.context.limits.update_one({"_id": "mail"}, {"$push": {"holders": {
        "l": "gone", "k": "tenant-a", "w": "w-dead",
        "until": held.context.clock() - timedelta(minutes=1)}}})
    check = _doctor_limits(run_cli)
    assert check["status"] == "warn"
    assert "mail: key tenant-a holds 1 slot past their leases (worker w-dead)" \
        in check["message"]


def test_doctor_sees_a_limit_far_below_its_workers(held: RunnerQ, run_cli) -> None:
    held.registry.register_worker("w-big", types=["charge"], concurrency=16)
    check = _doctor_limits(run_cli)
    assert check["status"] == "warn"
    assert "charge: a limit of 2 beside 16 handler slots" in check["message"]


def test_console_shows_limits_and_sets_one_as_a_guarded_audited_action(held: RunnerQ) -> None:
    from tests.test_console_api import Console

    c = Console(held)
    try:
        by_type = {r["activity_type"]: r for r in c.get("/api/limits")["limits"]}
        assert by_type["charge"]["in_use"] == 2 and by_type["charge"]["held_back"] == 3
        assert by_type["mail"]["busiest_keys"] == {"tenant-a": 1}
        assert {r["activity_type"] for r in c.get("/api/stats")["limits"]} == {"charge", "mail"}
        [row] = c.get("/api/queues")["queues"]
        assert sum(r["held_back"] for r in row["limits"]) == 5
        c.post("/api/actions/limit-set/preview", {"type": "charge", "concurrency": 3},
               403)  # no actions
    finally:
        c.close()
    c = Console(held, allow_actions=True)
    try:
        c.post("/api/actions/limit-set/preview", {"type": "charge", "concurrency": 0}, 400)
        c.post("/api/actions/limit-set/preview", {"type": "charge", "rate": "5 a minute"}, 400)
        c.post("/api/actions/limit-set/preview", {"type": "charge", "burst": 1}, 400)
        preview = c.post("/api/actions/limit-set/preview", {"type": "charge", "concurrency": 3})
        assert preview["before"]["concurrency"] == 2 and preview["after"]["concurrency"] == 3
        assert held.limits.get("charge").limits.concurrency == 2  # a preview reads only
        c.post("/api/actions/limit-set", {"confirm": preview["confirm"]}, 400)  # no actor
        done = c.post("/api/actions/limit-set", {"confirm": preview["confirm"],
                                                 "actor": "ada", "reason": "provider raised"})
        assert done["result"] == "updated" and done["state"]["concurrency"] == 3
        c.post("/api/actions/limit-set", {"confirm": preview["confirm"], "actor": "ada"}, 409)
        again = c.post("/api/actions/limit-set/preview", {"type": "charge", "concurrency": 3})
        assert again["unchanged"] is True and again["selected"] == 0
        entry = c.get("/api/audit")["entries"][0]
        assert entry["action"] == "limit set" and entry["actor"] == "ada"
        assert "console" in json.dumps(entry)
    finally:
        c.close()

"""Schedules seen everywhere the queue is seen (issue 30, item 6), as a user runs the
commands: `stats` (text, -o json, -o prometheus/openmetrics), `queues`, `doctor`'s four
schedule checks, `explain` of a fired activity, and `metrics serve`'s collector."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import MongoClient

from runnerq_cli.backend.api import RunnerQ


@pytest.fixture
def schedules(server, db_name):
    client = MongoClient(server.uri, uuidRepresentation="standard", tz_aware=True)
    yield client[db_name]["runnerq_tests_schedules"]
    client.close()


def add(run_cli, name: str, *options: str) -> None:
    r = run_cli("schedule", "add", name, *options)
    assert r.code == 0, r.stderr


def overdue(schedules, name: str, seconds: float = 3600) -> None:
    """As if every worker had been down `seconds`: the next fire that long ago."""
    schedules.update_one({"_id": name}, {"$set": {
        "next_fire_at": datetime.now(UTC) - timedelta(seconds=seconds)}})


def malformed(schedules, name: str = "broken") -> None:
    schedules.insert_one({"_id": name, "activity": {"activity_type": 7}, "every_seconds": 60,
                          "paused": False, "revision": 1, "created_at": datetime.now(UTC)})


def test_stats_counts_schedules_paused_next_fire_and_missed(run_cli, schedules):
    r = run_cli("stats", "-o", "json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["schedules"]["count"] == 0
    line = next(x for x in run_cli("stats").stdout.splitlines() if x.startswith("schedules"))
    assert line.split() == ["schedules", "none"]
    add(run_cli, "hourly", "--type", "report", "--cron", "0 * * * *")
    add(run_cli, "quick", "--type", "report", "--every", "10m")
    add(run_cli, "held", "--type", "report", "--every", "1m")
    assert run_cli("schedule", "pause", "held").code == 0
    schedules.update_one({"_id": "hourly"}, {"$set": {"missed_fires": 4}})
    snap = json.loads(run_cli("stats", "-o", "json").stdout)["schedules"]
    assert (snap["count"], snap["paused"], snap["missed_fires"], snap["late"]) == (3, 1, 4, 0)
    assert snap["next_fire"]["name"] in ("hourly", "quick")  # the sooner of the two
    assert 0 < snap["next_fire"]["in_seconds"] <= 3600
    text = run_cli("stats").stdout
    line = next(x for x in text.splitlines() if x.startswith("schedules"))
    assert "3, 1 paused, next" in line and "4 missed" in line
    overdue(schedules, "quick")
    malformed(schedules)
    snap = json.loads(run_cli("stats", "-o", "json").stdout)["schedules"]
    assert (snap["late"], snap["problems"]) == (1, 1)
    line = next(x for x in run_cli("stats").stdout.splitlines() if x.startswith("schedules"))
    assert "1 overdue" in line and "1 malformed" in line and "due now" in line
    assert run_cli("stats", "--check", "schedules_count == 4").code == 0
    r = run_cli("stats", "--check", "schedules_late == 0")
    assert r.code == 7 and "schedules_late" in r.stderr


def test_stats_watch_shows_the_schedules_line(run_cli, schedules):
    add(run_cli, "quick", "--type", "report", "--every", "10m")
    r = run_cli("stats", "--watch", "--iterations", "1", "--interval", "0.1s")
    assert r.code == 0, r.stderr
    assert "schedules" in r.stdout and "next quick in" in r.stdout


def test_queues_has_a_schedules_column_and_json_field(run_cli, schedules):
    assert run_cli("init-indexes").code == 0  # a queue `queues` finds
    add(run_cli, "quick", "--type", "report", "--every", "10m")
    add(run_cli, "other", "--type", "report", "--every", "1h")
    overdue(schedules, "other")
    [row] = json.loads(run_cli("queues", "-o", "json").stdout)["queues"]
    assert row["schedules"]["count"] == 2 and row["schedules"]["late"] == 1
    text = run_cli("queues").stdout
    assert "schedules" in text.splitlines()[0] and "2, 1 late" in text
    narrow = run_cli("queues", env={"COLUMNS": "60"}).stdout
    assert all(len(line) <= 60 for line in narrow.splitlines())
    assert "paused" in narrow.splitlines()[0]  # the schedules give way first


def checks_of(run_cli) -> dict[str, dict]:
    r = run_cli("doctor", "-o", "json")
    assert r.code in (0, 7), r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)["checks"]}


def test_doctor_schedule_checks_ok_then_each_warn_or_fail(run_cli, schedules,
                                                          backend: RunnerQ):
    checks = checks_of(run_cli)
    for name in ("schedule coverage", "schedule fires", "schedule ends",
                 "schedule documents"):
        assert checks[name]["status"] == "ok", checks[name]
        assert checks[name]["queue"] == "tests"
    backend.registry.register_worker("w-emails", types=["email"], concurrency=2)
    add(run_cli, "nightly", "--type", "report", "--cron", "0 3 * * *")
    add(run_cli, "soon-over", "--type", "email", "--every", "1m")
    add(run_cli, "late", "--type", "email", "--every", "1h")
    overdue(schedules, "late", 7200)
    # Past its end: what a firer leaves (no instant left).
    schedules.update_one({"_id": "soon-over"}, {"$set": {"next_fire_at": None}})
    malformed(schedules)
    checks = checks_of(run_cli)
    cover = checks["schedule coverage"]
    assert cover["status"] == "warn" and "nightly (report)" in cover["message"]
    assert cover["facts"]["uncovered"] == [{"schedule": "nightly", "activity_type": "report"}]
    fires = checks["schedule fires"]
    assert fires["status"] == "warn" and "late by" in fires["message"]
    assert fires["fix"] and "worker" in fires["fix"]
    ended = checks["schedule ends"]
    assert ended["status"] == "warn" and "soon-over" in ended["message"]
    docs = checks["schedule documents"]
    assert docs["status"] == "fail" and "broken" in docs["message"]
    assert "activity_type" in docs["facts"]["set_aside"][0]["problem"]
    # A paused type waits on purpose (as `coverage` says): no warning for it.
    assert run_cli("pause", "--type", "report").code == 0
    assert checks_of(run_cli)["schedule coverage"]["status"] == "ok"
    text = run_cli("doctor")
    assert text.code == 7  # a FAIL
    assert "schedule documents" in text.stdout and "Traceback" not in text.stderr


def test_explain_names_the_schedule_and_its_state(run_cli, schedules):
    add(run_cli, "nightly", "--type", "report", "--cron", "0 3 * * *")
    fired = json.loads(run_cli("schedule", "trigger", "nightly", "-o", "json").stdout)
    aid = fired["activity_id"] if "activity_id" in fired else fired["id"]
    r = run_cli("explain", aid, "-o", "json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    origin = doc["facts"]["schedule"]
    assert (origin["name"], origin["fire"], origin["state"]) == ("nightly", "trigger", "active")
    assert "fired by schedule nightly (by a trigger" in doc["sentence"]
    assert "next fire is at" in doc["sentence"]
    assert run_cli("schedule", "pause", "nightly").code == 0
    assert "that schedule is paused" in run_cli("explain", aid).stdout
    assert run_cli("schedule", "remove", "nightly").code == 0
    assert "removed since" in run_cli("explain", aid).stdout
    # An activity enqueued by hand says nothing of schedules.
    plain = json.loads(run_cli("enqueue", "report", "-o", "json").stdout)
    pid = plain.get("activity_id") or plain.get("id")
    assert "schedule" not in json.loads(run_cli("explain", pid, "-o", "json").stdout)["facts"]


def test_prometheus_and_openmetrics_expose_each_schedule(run_cli, schedules):
    add(run_cli, "hourly", "--type", "report", "--cron", "0 * * * *")
    add(run_cli, "held", "--type", "report", "--every", "1m")
    assert run_cli("schedule", "pause", "held").code == 0
    assert run_cli("schedule", "trigger", "hourly").code == 0
    schedules.update_one({"_id": "hourly"}, {"$set": {
        "missed_fires": 2, "skipped_fires": 3, "overlap": "buffer_one",
        "buffered": {"at": datetime(2027, 1, 4, 12, 0, tzinfo=UTC), "kind": "on_time"}}})
    malformed(schedules)
    text = run_cli("stats", "-o", "prometheus").stdout
    series = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("runnerq_schedule")}
    label = '{queue="tests",schedule="hourly"}'
    held = '{queue="tests",schedule="held"}'
    broken = '{queue="tests",schedule="broken"}'
    next_at = schedules.find_one({"_id": "hourly"})["next_fire_at"]
    assert series[f"runnerq_schedule_next_fire_timestamp_seconds{label}"] == \
        pytest.approx(next_at.timestamp())
    assert f"runnerq_schedule_last_fire_timestamp_seconds{label}" in series
    assert series[f"runnerq_schedule_missed_fires{label}"] == 2
    assert series[f"runnerq_schedule_fires{label}"] == 1
    assert series[f"runnerq_schedule_skipped_fires{label}"] == 3
    assert series[f"runnerq_schedule_buffered{label}"] == 1
    assert series[f"runnerq_schedule_buffered{held}"] == 0
    assert series[f"runnerq_schedule_paused{held}"] == 1
    assert series[f"runnerq_schedule_paused{label}"] == 0
    assert f"runnerq_schedule_last_fire_timestamp_seconds{held}" not in series  # never fired
    assert series[f"runnerq_schedule_malformed{broken}"] == 1
    assert f"runnerq_schedule_next_fire_timestamp_seconds{broken}" not in series
    om = run_cli("stats", "-o", "openmetrics").stdout
    assert "# TYPE runnerq_schedule_missed_fires gauge" in om and om.endswith("# EOF\n")


def test_metrics_serve_collector_reads_the_schedules_once_per_scrape(settings, schedules):
    from runnerq_cli.backend.domain.schedules import ScheduleDef, Template
    from runnerq_cli.cli.exposition import QueueCollector, render

    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    backend.schedules.add(ScheduleDef("tick", Template("report"), every_seconds=60))
    collector = QueueCollector(lambda: [settings.queue], lambda _: backend, min_interval=0)
    names = {m.name: m for m in collector.collect()}
    assert [s.labels for s in names["runnerq_schedule_paused"].samples] == [
        {"queue": "tests", "schedule": "tick"}]
    assert names["runnerq_schedule_next_fire_timestamp_seconds"].samples[0].value > 0
    assert "runnerq_schedule_fires" in render([])  # declared even with no sample


# ------------------------------------------------------------------ the console's API


def test_console_schedules_view_and_guarded_actions(backend: RunnerQ, schedules,
                                                    run_cli) -> None:
    from tests.test_console_api import Console

    add(run_cli, "nightly", "--type", "report", "--cron", "30 2 * * *",
        "--timezone", "Europe/Berlin")
    malformed(schedules, "<b>broken</b>")
    c = Console(backend)
    try:
        res = c.get("/api/schedules")
        by_name = {r["name"]: r for r in res["schedules"]}
        nightly = by_name["nightly"]
        assert nightly["timezone"] == "Europe/Berlin" and not nightly["paused"]
        assert "activity_type" in by_name["<b>broken</b>"]["problem"]
        assert res["summary"]["count"] == 2 and res["summary"]["problems"] == 1
        assert c.get("/api/stats")["schedules"] == json.loads(
            run_cli("stats", "-o", "json").stdout)["schedules"] | {
                "next_fire": c.get("/api/stats")["schedules"]["next_fire"]}  # in_seconds moves
        [row] = c.get("/api/queues")["queues"]
        assert row["schedules"]["count"] == 2
        c.post("/api/actions/schedule-pause/preview", {"name": "nightly"}, 403)  # no actions
    finally:
        c.close()
    c = Console(backend, allow_actions=True)
    try:
        c.post("/api/actions/schedule-pause/preview", {}, 400)  # which schedule?
        c.post("/api/actions/schedule-pause/preview", {"name": "nope"}, 404)
        c.post("/api/actions/schedule-trigger/preview", {"name": "<b>broken</b>"}, 400)
        preview = c.post("/api/actions/schedule-pause/preview", {"name": "nightly"})
        assert preview["selected"] == 1 and preview["schedule"]["name"] == "nightly"
        assert schedules.find_one({"_id": "nightly"})["paused"] is False  # reads only
        c.post("/api/actions/schedule-pause", {"confirm": preview["confirm"]}, 400)  # no actor
        done = c.post("/api/actions/schedule-pause", {"confirm": preview["confirm"],
                                                      "actor": "ada", "reason": "freeze"})
        assert done["changed"] is True and done["state"]["paused"] is True
        c.post("/api/actions/schedule-pause", {"confirm": preview["confirm"], "actor": "ada"},
               409)  # a confirmation acts once
        again = c.post("/api/actions/schedule-pause/preview", {"name": "nightly"})
        assert again["unchanged"] is True and again["selected"] == 0
        token = c.post("/api/actions/schedule-trigger/preview", {"name": "nightly"})["confirm"]
        fired = c.post("/api/actions/schedule-trigger", {"confirm": token, "actor": "ada"})
        assert backend.get_activity(fired["activity_id"]).metadata["runnerq_fire"] == "trigger"
        token = c.post("/api/actions/schedule-resume/preview", {"name": "nightly"})["confirm"]
        assert c.post("/api/actions/schedule-resume",
                      {"confirm": token, "actor": "ada"})["state"]["paused"] is False
        entries = c.get("/api/audit")["entries"]
        assert [e["action"] for e in entries[:3]] == [
            "schedule resume", "schedule trigger", "schedule pause"]
        assert all(e["actor"] == "ada" and e["detail"]["command"] == "console"
                   for e in entries[:3])
        assert entries[2]["reason"] == "freeze"
    finally:
        c.close()


def test_a_fired_activitys_enqueue_step_names_its_fire(run_cli, schedules):
    """`events`, `show` and the tail say which schedule and which fire enqueued an
    activity, on its Enqueued step (its Scheduled step when the fire delays it); an
    activity enqueued by hand, or one whose metadata holds other types under those keys
    (another program's), shows its step as before."""
    add(run_cli, "nightly", "--type", "report", "--cron", "0 3 * * *")
    add(run_cli, "later", "--type", "report", "--every", "1h", "--delay", "10m")
    fired = json.loads(run_cli("schedule", "trigger", "nightly", "-o", "json").stdout)
    delayed = json.loads(run_cli("schedule", "trigger", "later", "-o", "json").stdout)
    hand = json.loads(run_cli("enqueue", "report", "-m", "runnerq_fire=x", "-o", "json").stdout)
    odd = json.loads(run_cli("enqueue", "report", "-o", "json").stdout)
    schedules.database["runnerq_tests_activities"].update_one(
        {"_id": uuid.UUID(odd["id"])},
        {"$set": {"metadata": {"runnerq_schedule": 7, "runnerq_fire": ["x"]}}})

    def enqueue_step(aid: str) -> dict:
        r = run_cli("events", aid, "-o", "json")
        assert r.code == 0, r.stderr
        [step] = [e for e in json.loads(r.stdout)["events"]
                  if e["event_type"] in ("Enqueued", "Scheduled")]
        return step

    step = enqueue_step(fired["activity_id"])
    assert step["event_type"] == "Enqueued"
    assert step["detail"]["schedule"] == "nightly" and step["detail"]["fire"] == "trigger"
    assert step["detail"]["fire_at"].endswith("Z")
    later = enqueue_step(delayed["activity_id"])
    assert later["event_type"] == "Scheduled" and later["detail"]["schedule"] == "later"
    for aid in (hand["id"], odd["id"]):
        assert set(enqueue_step(aid)["detail"]) == {"priority"}
    text = run_cli("events", fired["activity_id"]).stdout
    assert "schedule=nightly" in text and "fire=trigger" in text
    assert "schedule=nightly" in run_cli("show", fired["activity_id"]).stdout
    tail = run_cli("tail", "events", "--since", "1h", "--no-follow", "--activity",
                   fired["activity_id"], "-o", "jsonl")
    assert tail.code == 0, tail.stderr
    [tailed] = [json.loads(line) for line in tail.stdout.splitlines()
                if json.loads(line).get("event_type") == "Enqueued"]
    assert tailed["detail"] == step["detail"]  # one step reads the same everywhere


@pytest.mark.parametrize("kind", [5, None, ["on_time"]])
def test_a_last_fire_kind_of_another_type_reads_as_null(run_cli, schedules, kind):
    """design.md: the fields of `last_fire` other than `at` of another type are read as
    null: shown as null in JSON and as unknown in text, never as "5" or "None"."""
    add(run_cli, "nightly", "--type", "report", "--cron", "0 3 * * *")
    schedules.update_one({"_id": "nightly"}, {"$set": {"last_fire": {
        "at": datetime.now(UTC), "kind": kind, "count": 1}}})
    shown = json.loads(run_cli("schedule", "show", "nightly", "-o", "json").stdout)
    assert shown["last_fire"]["kind"] is None
    text = run_cli("schedule", "show", "nightly").stdout
    assert "(kind unknown)" in text and "(None)" not in text and "(5)" not in text
    listed = run_cli("schedule", "list").stdout
    assert "None" not in listed and " 5 " not in listed


def test_a_hostile_schedule_name_is_shown_literally(run_cli, schedules):
    malformed(schedules, "evil\x1b[2J\u202ename")
    for args in (("doctor",), ("stats",), ("queues",)):
        if args == ("queues",):
            assert run_cli("init-indexes").code == 0
        r = run_cli(*args)
        assert "\x1b" not in r.stdout and "\u202e" not in r.stdout, args
    assert "evil\\x1b[2J\\u202ename" in run_cli("doctor").stdout

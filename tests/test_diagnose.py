"""`doctor`, `explain ID` and `queues`: healthy and broken setups, every explanation."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.diagnosis.plans import plan_problems, plan_stages
from runnerq_cli.backend.diagnosis.server_checks import check_clock
from runnerq_cli.backend.domain.index_specs import index_name, index_plan
from runnerq_cli.backend.domain.queries import representative_queries
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.errors import CommandFailed, NotFound
from tests.helpers import drive_to as make
from tests.helpers import run_then_crash


def doctor(run_cli, *args: str) -> tuple[int, dict[str, str], dict]:
    """Run `doctor -o json`: (exit code, {check name: status}, the document)."""
    res = run_cli("doctor", "-o", "json", *args)
    assert res.code in (0, 7), res.stderr
    doc = json.loads(res.stdout)
    return res.code, {c["name"]: c["status"] for c in doc["checks"]}, doc


def failing(statuses: dict[str, str]) -> set[str]:
    # A real MongoDB also checks query plans; a missing index may fail that one too.
    return {name for name, status in statuses.items() if status == "fail"}


def live_worker(queue: RunnerQ, worker_id: str = "w-live", types: tuple[str, ...] = ()) -> None:
    queue.registry.register_worker(worker_id, types=list(types), concurrency=2)


# ------------------------------------------------------------------ doctor


def test_doctor_healthy_after_fresh_init_indexes(run_cli) -> None:
    init = run_cli("init-indexes")
    assert init.code == 0
    created = int(init.stdout.strip().splitlines()[-1].split(": ")[-1].split()[0])
    code, statuses, doc = doctor(run_cli)
    indexes = next(c for c in doc["checks"] if c["name"] == "indexes")
    # the same count as init-indexes printed (the TTL ones included)
    assert indexes["message"].startswith(f"all {created} indexes present"), (init.stdout,
                                                                              indexes)
    assert code == 0 and doc["ok"] is True
    assert set(statuses) == {"server", "clock", "indexes", "ttl", "query plans", "workers",
                             "coverage", "leases", "timeouts", "outbox", "pause", "backlog",
                             "dead letters", "documents", "waits", "trees", "partitions",
                             "schedule coverage",
                             "schedule fires", "schedule ends", "schedule documents"}
    assert all(s in ("ok", "not_checked") for s in statuses.values()), statuses
    strict = run_cli("doctor", "--strict")
    assert strict.code == 0, strict.stdout
    lines = strict.stdout.strip().splitlines()
    assert lines[0].startswith("ok    server: ")
    assert lines[-1].startswith("doctor: ")
    assert not any(line.startswith("FAIL") for line in lines)


def test_query_plans_not_checked_on_a_server_without_mongodb_explain(run_cli, server) -> None:
    run_cli("init-indexes")
    _, _, doc = doctor(run_cli)
    plans = next(c for c in doc["checks"] if c["name"] == "query plans")
    if server.real_mongodb:
        assert plans["status"] == "ok", plans
        assert "claim" in plans["facts"]["served"]
    else:
        assert plans["status"] == "not_checked"
        assert "not checked" in plans["message"]


def test_missing_index_fails(queue: RunnerQ, run_cli) -> None:
    target = next(r for r in queue.maintenance.init_indexes(write=False)
                  if "expireAfterSeconds" not in r.spec.options and r.spec.collection
                  == "activities")
    queue.db[target.collection_name].drop_index(target.spec.name)
    code, statuses, doc = doctor(run_cli)
    assert code == ExitCode.CHECK_FAILED
    assert failing(statuses) - {"query plans"} == {"indexes"}
    check = next(c for c in doc["checks"] if c["name"] == "indexes")
    assert target.spec.name in check["message"]
    assert "init-indexes" in check["fix"]
    text = run_cli("doctor")
    assert text.code == 7
    assert any(line.startswith("FAIL  indexes:") for line in text.stdout.splitlines())
    assert "      fix: run `runnerq-mongo --queue tests init-indexes`" in text.stdout


def test_conflicting_ttl_fails(queue: RunnerQ, run_cli) -> None:
    ttl = next(r for r in queue.maintenance.init_indexes(write=False)
               if r.spec.collection == "results")
    collection = queue.db[ttl.collection_name]
    collection.drop_index(ttl.spec.name)
    collection.create_index(list(ttl.spec.keys), name=ttl.spec.name, expireAfterSeconds=60)
    code, statuses, doc = doctor(run_cli)
    assert code == 7
    assert failing(statuses) == {"ttl"}
    check = next(c for c in doc["checks"] if c["name"] == "ttl")
    assert "expireAfterSeconds" in check["message"] and "60" in check["message"]
    assert "drop the TTL index" in check["fix"]


def test_stale_worker_fails(queue: RunnerQ, clock, run_cli) -> None:
    clock.advance(-120)
    queue.registry.register_worker("w-dead", types=["job"])
    clock.advance(120)
    code, statuses, doc = doctor(run_cli)
    assert code == 7
    assert failing(statuses) == {"workers"}
    check = next(c for c in doc["checks"] if c["name"] == "workers")
    assert "w-dead" in check["message"] and check["facts"]["stale"] == 1


def test_type_without_live_worker_fails(queue: RunnerQ, run_cli) -> None:
    live_worker(queue, types=("a",))
    queue.enqueue("a", {})
    queue.enqueue("b", {})
    queue.enqueue("b", {})
    code, statuses, doc = doctor(run_cli)
    assert code == 7
    assert failing(statuses) == {"coverage"}
    check = next(c for c in doc["checks"] if c["name"] == "coverage")
    assert check["message"] == "no live worker handles b (2 pending)"
    assert check["facts"]["without_worker"] == {"b": 2}


def test_a_paused_type_without_a_worker_does_not_fail(queue: RunnerQ, run_cli) -> None:
    """Paused on purpose: coverage names it as paused, OK; doctor exits 0 for it (the
    pause check warns, as for any pause). Another orphan type still fails."""
    live_worker(queue, types=("a",))
    queue.enqueue("send_email", {})
    queue.control.pause(["send_email"], reason="mail server down")
    code, statuses, doc = doctor(run_cli)
    assert "coverage" not in failing(statuses) and code != 7, doc
    check = next(c for c in doc["checks"] if c["name"] == "coverage")
    assert check["status"] == "ok" and "send_email (1 pending), paused" in check["message"]
    queue.enqueue("b", {})
    [check] = [c for c in queue.diagnosis.doctor() if c.name == "coverage"]
    assert check.status == "fail" and check.facts["without_worker"] == {"b": 1}
    assert check.facts["paused_without_worker"] == {"send_email": 1}


def test_activity_past_its_lease_fails(queue: RunnerQ, clock, run_cli) -> None:
    clock.advance(-3600)
    queue.enqueue("job", {})
    assert queue.dequeue("w-gone", lease_seconds=60)
    clock.advance(3600)
    code, statuses, doc = doctor(run_cli)
    assert code == 7
    assert failing(statuses) == {"leases"}
    check = next(c for c in doc["checks"] if c["name"] == "leases")
    assert "no worker is alive to reap them" in check["message"]
    assert check["facts"]["expired_over_grace"] == 1


def test_activity_held_past_its_timeout_under_a_renewed_lease_fails(queue: RunnerQ,
                                                                     run_cli) -> None:
    """A slot that died while its lease is still renewed: the lease never expires (the
    `leases` check sees nothing), but the attempt is past its timeout_seconds. Counted
    from the claim (`started_at`), as the worker counts it, with a 30 s grace: claimed
    100 s ago with a 60 s timeout is named, 80 s ago is not (yet)."""
    from runnerq_cli.backend.domain.timing import TIMING

    assert TIMING.timeout_overdue == 30
    live_worker(queue, "w-stuck")
    for _ in range(2):
        queue.enqueue("job", {}, timeout_seconds=60)
    stuck, within = queue.dequeue("w-stuck", lease_seconds=60, limit=2)
    # Renewals since: the claim long ago, the lease renewed just now.
    activities = queue.context.activities
    for claim, ago in ((stuck, 100_000), (within, 80_000)):
        activities.update_one({"_id": claim.activity_id}, [{"$set": {
            "started_at": {"$subtract": ["$$NOW", ago]}}}])
        assert queue.extend_lease(claim, 60)
    code, statuses, doc = doctor(run_cli)
    assert code == 7
    assert failing(statuses) == {"timeouts"}
    check = next(c for c in doc["checks"] if c["name"] == "timeouts")
    assert [h["id"] for h in check["facts"]["held_past_timeout"]] == [str(stuck.activity_id)]
    assert str(stuck.activity_id) in check["message"] and "w-stuck" in check["fix"]
    assert "counted from the claim" in check["message"]


def test_old_outbox_fails(queue: RunnerQ, settings, clock, run_cli) -> None:
    live_worker(queue)
    # A writer that crashed between its update and the copy leaves its outbox behind.
    aid = uuid.UUID(run_then_crash(settings, clock() - timedelta(minutes=5), """
        out = q.enqueue("job", {}).activity_id
        q.ack_failure(q.dequeue("w", types=["job"])[0], "boom", retryable=False)
    """))
    assert "outbox" in queue.context.activities.find_one({"_id": aid})
    code, statuses, doc = doctor(run_cli)
    assert code == 7
    assert failing(statuses) == {"outbox"}
    check = next(c for c in doc["checks"] if c["name"] == "outbox")
    assert check["facts"]["older_than_a_minute"] == 1


def test_cost_does_not_grow_with_the_queue(queue: RunnerQ, server_to_itself) -> None:
    """The same number of server operations on 3 activities as on 153: no per-activity work,
    no cursor paged through (getmore). The plans themselves: the `query plans` check."""
    from runnerq_cli.backend.queue.queue import ActivitySpec

    def operations(run) -> dict[str, int]:
        status = queue.db.admin_command
        queue.context.cached_reads.clear()  # each read whole (the shape scan not reused)
        before = status("serverStatus")["opcounters"]
        run()
        after = status("serverStatus")["opcounters"]
        # A real server also counts the driver's monitoring (commands) and TTL deletes.
        noise = ("command", "delete") if server_to_itself.real_mongodb else ()
        return {k: after[k] - before[k] for k in after if k not in noise}

    live_worker(queue)
    for _ in range(3):
        queue.enqueue("job", {})
    small = (operations(queue.diagnosis.doctor), operations(queue.inspector.metrics_sample),
             operations(queue.diagnosis.summary))
    queue.enqueue_many([ActivitySpec("job", {}) for _ in range(150)])
    large = (operations(queue.diagnosis.doctor), operations(queue.inspector.metrics_sample),
             operations(queue.diagnosis.summary))
    assert large == small
    assert all(ops["getmore"] == 0 for ops in large)


def test_warnings_pass_unless_strict(queue: RunnerQ, run_cli) -> None:
    make(queue, "dead_letter")
    code, statuses, _ = doctor(run_cli)
    assert code == 0 and statuses["dead letters"] == "warn"
    res = run_cli("doctor", "--strict")
    assert res.code == 7
    assert "warn  dead letters: 1 dead-lettered in the last hour" in res.stdout


def test_doctor_every_queue_and_unknown_queue(queue: RunnerQ, run_cli) -> None:
    other = queue.for_queue("other")
    other.maintenance.init_indexes()
    res = run_cli("doctor", "--all-queues", "-o", "json")
    assert res.code == 0, res.stdout
    doc = json.loads(res.stdout)
    assert doc["queues"] == ["other", "tests"]
    assert [c["name"] for c in doc["checks"] if c["queue"] is None] == ["server", "clock"]
    assert {c["queue"] for c in doc["checks"] if c["name"] == "indexes"} == {"other", "tests"}
    jsonl = run_cli("doctor", "--all-queues", "-o", "jsonl")
    assert len(jsonl.stdout.splitlines()) == 2 + 2 * 19  # 15 checks, 4 of schedules
    # A queue with no collections: its indexes are missing.
    code, statuses, _ = doctor(run_cli, "--queue", "nowhere")
    assert code == 7 and statuses["indexes"] == "fail"
    bad = run_cli("doctor", "--queue", "x", "--all-queues")
    assert bad.code == 2 and bad.stderr.startswith("error: ") and bad.stdout == ""
    bad = run_cli("doctor", "--queue", "no/slash")
    assert bad.code == 2 and bad.stderr.startswith("error: invalid queue name")


def test_secondary_read_preference_warns(queue: RunnerQ, server, run_cli) -> None:
    sep = "&" if "?" in server.uri else ("?" if server.uri.count("/") > 2 else "/?")
    uri = f"{server.uri}{sep}readPreference=secondaryPreferred"
    res = run_cli("doctor", "-o", "json", env={"RUNNERQ_MONGO_URI": uri})
    assert res.code == 0, res.stderr
    check = json.loads(res.stdout)["checks"][0]
    assert check["name"] == "server" and check["status"] == "warn"
    assert "read preference" in check["message"] and "readPreference" in check["fix"]
    assert run_cli("doctor", "--strict", env={"RUNNERQ_MONGO_URI": uri}).code == 7


@pytest.mark.parametrize(("skew", "status"), [(0.2, "ok"), (-3.0, "warn"), (20.0, "fail")])
def test_clock_skew_thresholds(queue: RunnerQ, skew: float, status: str) -> None:
    """The server's clock `skew` seconds ahead of this host's (a quarter lease fails)."""
    here = datetime.now(UTC)
    info = {"hello": {"localTime": (here + timedelta(seconds=skew)).replace(tzinfo=None)},
            "midpoint": here.timestamp(), "rtt": 0.002}
    check = check_clock(queue.settings, info)
    assert check.status.value == status
    assert check.facts["skew_seconds"] == pytest.approx(skew, abs=0.01)
    assert check.facts["fail_at_seconds"] == queue.settings.lease / 4


def test_doctor_unreachable_server(run_cli) -> None:
    env = {"RUNNERQ_MONGO_URI": "mongodb://u:secret@127.0.0.1:1",
           "RUNNERQ_SERVER_SELECTION_TIMEOUT": "300ms"}
    res = run_cli("doctor", env=env)
    assert res.code == ExitCode.UNAVAILABLE
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert res.stdout.startswith("FAIL  server: MongoDB at mongodb://u:****@127.0.0.1:1")
    assert "fix: check the URI" in res.stdout
    assert "secret" not in res.stderr + res.stdout
    doc = json.loads(run_cli("doctor", "-o", "json", env=env).stdout)
    assert doc["ok"] is False
    assert [(c["name"], c["status"]) for c in doc["checks"]] == [("server", "fail")]


# ----------------------------------------------------- query plans (explain format)

COLLSCAN = {"queryPlanner": {"winningPlan": {"stage": "LIMIT", "inputStage": {
    "stage": "SORT", "inputStage": {"stage": "COLLSCAN"}}}, "rejectedPlans": []}}
INDEXED = {"queryPlanner": {"winningPlan": {"stage": "LIMIT", "inputStage": {
    "stage": "FETCH", "inputStage": {"stage": "SORT_MERGE", "inputStages": [
        {"stage": "IXSCAN"}, {"stage": "IXSCAN"}]}}},
    "rejectedPlans": [{"stage": "SORT", "inputStage": {"stage": "COLLSCAN"}}]}}
SBE = {"queryPlanner": {"winningPlan": {"queryPlan": {"stage": "GROUP", "inputStage": {
    "stage": "PROJECTION_COVERED", "inputStage": {"stage": "IXSCAN"}}},
    "slotBasedPlan": {"slots": "...", "stages": "..."}}}}
AGGREGATE = {"stages": [{"$cursor": {"queryPlanner": {"winningPlan": {
    "stage": "PROJECTION_SIMPLE", "inputStage": {"stage": "COLLSCAN"}}}}}, {"$group": {}}]}
SHARDED = {"queryPlanner": {"winningPlan": {"stage": "SHARD_MERGE", "shards": [
    {"shardName": "a", "winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN"}}},
    {"shardName": "b", "winningPlan": {"stage": "SORT", "inputStage": {"stage": "IXSCAN"}}}]}}}


@pytest.mark.parametrize(("explained", "problems"), [
    (COLLSCAN, ["collection scan", "in-memory sort"]),
    (INDEXED, []),  # a rejected plan's collection scan does not count
    (SBE, []),
    (AGGREGATE, ["collection scan"]),
    (SHARDED, ["in-memory sort"]),
])
def test_plan_problems_found_recursively(explained, problems) -> None:
    stages = plan_stages(explained)
    assert stages is not None
    assert plan_problems(stages) == problems


def test_explain_not_in_mongodb_format_is_not_judged() -> None:
    assert plan_stages({"engine": "memory", "plan": "EqualsCondition(...)", "ok": 1.0}) is None


def test_representative_queries_cover_the_code_paths(settings, clock) -> None:
    names = {q.name for q in representative_queries(settings, clock())}
    for needed in ("claim", "scheduler", "reaper", "retention completed", "list pending",
                   "stats counts (pending)", "stats oldest pending", "events of an activity",
                   "tail: enqueued", "tail: started", "tail: completed"):
        assert needed in names


def test_each_query_is_served_by_the_index_meant_for_it(queue: RunnerQ, clock) -> None:
    """Every query runs with a hint naming its index: a server refuses a hint that cannot
    serve the query (the dev server checks partial filters too), so a query that drifts
    from its index fails here; on a real MongoDB, doctor's explain check covers the rest."""
    queue.maintenance.init_indexes()
    planned = {spec.name for spec in index_plan(queue.settings)}
    for query in representative_queries(queue.settings, clock()):
        index = query.index(queue.settings)
        assert index in planned, query.name
        collection = queue.db[f"runnerq_{queue.queue}_{query.role}"]
        if query.pipeline is not None:
            list(collection.aggregate(list(query.pipeline), hint=index))
        else:
            cursor = collection.find(query.filter).hint(index)
            if query.sort:
                cursor = cursor.sort(list(query.sort))
            list(cursor.limit(1))
    # A hint that cannot serve the query is refused: the check above can fail.
    with pytest.raises(CommandFailed):  # the server's refusal, translated (driver.py)
        list(queue.db[f"runnerq_{queue.queue}_activities"].find({"status": "completed"})
             .hint(index_name(queue.settings, "claim order")))


# ------------------------------------------------------------------ explain


def test_explain_scheduled(queue: RunnerQ) -> None:
    aid = queue.enqueue("job", {}, delay_seconds=600).activity_id
    found = queue.diagnosis.explain(aid)
    assert (found.reason, found.status) == ("scheduled", "scheduled")
    assert found.sentence.startswith("Scheduled for ") and "(in 10m" in found.sentence
    assert found.facts["due_in_seconds"] == pytest.approx(600)


def test_explain_backing_off(queue: RunnerQ, clock) -> None:
    aid = queue.enqueue("job", {}, retry_delay_seconds=30).activity_id
    claim = queue.dequeue("w1")[0]
    queue.ack_failure(claim, "upstream said 503")
    found = queue.diagnosis.explain(aid)
    assert found.reason == "backing_off"
    assert found.sentence.startswith("Backing off after attempt 1 (upstream said 503); due at ")
    assert found.facts["due_in_seconds"] == pytest.approx(60)
    clock.advance(120)  # due now, and no worker runs the scheduler
    assert "none is live" in queue.diagnosis.explain(aid).sentence


def test_explain_held_with_a_live_lease(queue: RunnerQ) -> None:
    live_worker(queue, "w1")
    aid = queue.enqueue("job", {}).activity_id
    queue.dequeue("w1", lease_seconds=120)
    found = queue.diagnosis.explain(aid)
    assert found.reason == "held"
    assert found.sentence.startswith("Running: held by worker w1 whose lease is live until ")
    assert found.facts["worker_registered"] is True and found.facts["worker_stale"] is False


def test_explain_lease_expired(queue: RunnerQ, clock) -> None:
    aid = queue.enqueue("job", {}).activity_id
    queue.dequeue("w-gone", lease_seconds=5)
    clock.advance(60)
    found = queue.diagnosis.explain(aid)
    assert found.reason == "lease_expired"
    assert "whose lease expired at" in found.sentence
    assert "no worker is alive to run the reaper" in found.sentence
    assert "requeue it (attempt 2 of 3)" in found.sentence
    live_worker(queue)
    found = queue.diagnosis.explain(aid)
    assert "the reaper of the live worker will requeue it" in found.sentence
    assert found.facts["reaper_will"] == "requeue"


@pytest.mark.parametrize("partitions", [1])  # the whole queue's claim order
def test_explain_pending_place_and_workers(queue: RunnerQ, clock) -> None:
    queue.enqueue("job", {}, priority="normal")
    clock.advance(1)
    queue.enqueue("other", {}, priority="critical")
    queue.enqueue("other", {}, priority="critical")
    queue.enqueue("job", {}, priority="low")  # behind it: not counted
    aid = queue.enqueue("job", {}, priority="normal").activity_id
    found = queue.diagnosis.explain(aid)
    assert found.reason == "pending"
    assert found.facts["ahead_by_priority"] == {"critical": 2, "normal": 1}
    assert found.sentence == ("Pending (normal priority): 3 ahead of it in claim order "
                              "(2 critical, 1 normal); no live worker handles job.")
    live_worker(queue, "w-other", types=("other",))
    assert "no live worker handles job" in queue.diagnosis.explain(aid).sentence
    live_worker(queue, "w-job", types=("job",))
    found = queue.diagnosis.explain(aid)
    assert found.facts["handled_by"] == ["w-job"]
    assert found.sentence.endswith("1 live worker handles job (w-job).")


@pytest.mark.parametrize(("state", "start"), [
    ("completed", "Completed at "),
    ("failed", "Failed (non-retryable) at "),
    ("dead_letter", "Dead-lettered at "),
    ("cancelled", "Cancelled by an operator at "),
])
def test_explain_terminal(queue: RunnerQ, state: str, start: str) -> None:
    aid = make(queue, state)
    found = queue.diagnosis.explain(aid)
    assert found.reason == state and found.sentence.startswith(start)
    if state in ("failed", "dead_letter"):
        assert found.sentence.endswith(": boom.")
    assert found.facts["completed_at"] is not None


def test_explain_ends_with_one_full_stop_after_an_error_ending_in_one(queue: RunnerQ) -> None:
    aid = queue.enqueue("job", {}, max_retries=1).activity_id
    claim = queue.dequeue("w", types=["job"], limit=1)[0]
    queue.ack_failure(claim, "Try 'sleep --help' for more information.", retryable=True)
    sentence = queue.diagnosis.explain(aid).sentence
    assert sentence.startswith("Dead-lettered at ")
    assert sentence.endswith("for more information.") and not sentence.endswith("..")


def test_explain_paused_queue(queue: RunnerQ) -> None:
    aid = queue.enqueue("job", {}).activity_id
    assert queue.diagnosis.explain(aid).facts["paused"] is False
    queue.control.pause(["other"], reason="maintenance")  # another type: not this activity's
    assert queue.diagnosis.explain(aid).facts["paused"] is False
    queue.control.pause(reason="maintenance")
    found = queue.diagnosis.explain(aid)
    assert found.facts["paused"] is True
    assert found.sentence.endswith("Its queue tests is paused: nothing is claimed until it "
                                   "is resumed.")


def test_explain_not_found(queue: RunnerQ, run_cli) -> None:
    with pytest.raises(NotFound):
        queue.diagnosis.explain(uuid.uuid4())
    res = run_cli("explain", str(uuid.uuid4()))
    assert res.code == ExitCode.NOT_FOUND
    assert res.stderr.startswith("error: activity ") and "not found" in res.stderr
    assert res.stdout == ""
    bad = run_cli("explain", "not-a-uuid")
    assert bad.code == ExitCode.USAGE and bad.stderr.startswith("error: invalid activity id")


def test_explain_finds_the_activity_in_another_queue(queue: RunnerQ, run_cli) -> None:
    queue.enqueue("job", {})
    elsewhere = queue.for_queue("emails")
    elsewhere.maintenance.init_indexes()
    aid = elsewhere.enqueue("send", {}).activity_id
    with pytest.raises(NotFound):
        queue.diagnosis.explain(aid)
    assert queue.diagnosis.explain(aid, any_queue=True).queue == "emails"
    doc = json.loads(run_cli("explain", str(aid), "-o", "json").stdout)
    assert doc["queue"] == "emails" and doc["facts"]["activity_type"] == "send"
    res = run_cli("explain", str(uuid.uuid4()))
    assert res.code == 4 and "in any queue of database" in res.stderr


def test_explain_cli_text_and_json(queue: RunnerQ, run_cli) -> None:
    aid = queue.enqueue("job", {}, delay_seconds=600).activity_id
    res = run_cli("explain", str(aid))
    assert res.code == 0
    lines = res.stdout.splitlines()
    assert lines[0].startswith("Scheduled for ")
    assert f"  id: {aid}  queue: tests  status: scheduled" in lines
    doc = json.loads(run_cli("explain", str(aid), "-o", "json").stdout)
    assert doc["reason"] == "scheduled" and doc["activity_id"] == str(aid)
    assert doc["facts"]["activity_type"] == "job"


# ------------------------------------------------------------------- queues


def test_queues_lists_every_queue(queue: RunnerQ, clock, run_cli) -> None:
    queue.enqueue("job", {})
    for name, n in (("emails", 2), ("reports-v2", 1)):
        other = queue.for_queue(name)
        other.maintenance.init_indexes()
        for _ in range(n):
            other.enqueue("job", {})
    make(queue.for_queue("emails"), "completed", activity_type="done")
    queue.for_queue("emails").registry.register_worker("w-e")
    queue.control.pause(reason="maintenance")
    queue.db["unrelated"].insert_one({})
    res = run_cli("queues", "-o", "json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    rows = {row["queue"]: row for row in doc["queues"]}
    assert list(rows) == ["emails", "reports-v2", "tests"]
    assert rows["emails"]["by_status"]["pending"] == 2
    assert rows["emails"]["by_status"]["completed"] == 1
    assert rows["emails"]["workers"]["live"] == 1
    assert rows["reports-v2"]["by_status"]["pending"] == 1
    assert rows["tests"]["paused"] is True and rows["emails"]["paused"] is False
    assert rows["tests"]["oldest_pending_age_seconds"] is not None
    jsonl = run_cli("queues", "-o", "jsonl")
    assert [json.loads(line)["queue"] for line in jsonl.stdout.splitlines()] == list(rows)
    text = run_cli("queues")
    assert text.code == 0
    lines = text.stdout.splitlines()
    assert lines[0].split()[:3] == ["queue", "pending", "scheduled"]
    assert [line.split()[0] for line in lines[1:]] == ["emails", "reports-v2", "tests"]
    # small queues: every count exact, so no ≈ and no footnote (metrics.EXACT_COMPLETED_UP_TO)
    assert "≈" not in text.stdout


def test_queues_tells_a_type_pause_from_a_queue_pause(queue: RunnerQ, run_cli) -> None:
    """One type paused is not the queue paused: `1 type`, JSON `paused` false with
    `paused_types`; the whole queue is `queue` / true."""
    queue.enqueue("send_email", {})
    queue.control.pause(["send_email"], reason="mail server down")
    [row] = json.loads(run_cli("queues", "-o", "json").stdout)["queues"]
    assert (row["paused"], row["paused_types"]) == (False, ["send_email"])
    assert run_cli("queues").stdout.splitlines()[1].endswith(" 1 type")
    narrow = run_cli("queues", env={"COLUMNS": "60"}).stdout.splitlines()
    assert narrow[1].endswith(" 1 type") and all(len(ln) <= 60 for ln in narrow), narrow
    queue.control.pause()
    [row] = json.loads(run_cli("queues", "-o", "json").stdout)["queues"]
    assert (row["paused"], row["paused_types"]) == (True, [])
    assert run_cli("queues").stdout.splitlines()[1].endswith(" queue")
    queue.control.resume()
    assert run_cli("queues").stdout.splitlines()[1].endswith(" no")


def test_queues_empty_database(run_cli) -> None:
    res = run_cli("queues")
    assert res.code == 0 and res.stdout.startswith("no RunnerQ queues in database ")
    assert json.loads(run_cli("queues", "-o", "json").stdout)["queues"] == []

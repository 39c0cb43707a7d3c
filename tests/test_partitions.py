"""Partitioned queues (docs/design.md, "Partitions"; docs/partitions.md).

What a partitioned queue promises on the dev server: a partition in every activity
(the key's hash, else round robin), every claim and fenced write carrying it, claims in
rotation so no partition starves, order within a partition, readers that see the queue
whole, a count that only grows; and what one partition promises: today's commands and
documents, nothing about partitions on the wire but the count's read.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.diagnosis.partition_checks import _judge, check_partitions
from runnerq_cli.backend.domain.index_specs import index_plan
from runnerq_cli.backend.domain.models import MalformedDocument
from runnerq_cli.backend.domain.partitions import PARTITIONS_ID, Rotation, count_of, of_key
from runnerq_cli.backend.queue.maintenance import Maintenance
from runnerq_cli.backend.queue.queue import ActivityQueue
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.config import Settings
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.worker.engine import Worker
from tests import worker_handlers


class Recorder(monitoring.CommandListener):
    """Every command a client sends, whole."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def recorded(settings: Settings, clock: Any) -> Iterator[tuple[QueueContext, Recorder]]:
    """A queue context on its own client whose every command is recorded (on the fake
    clock: a lease expires without waiting)."""
    recorder = Recorder()
    client: MongoClient[dict[str, Any]] = MongoClient(
        settings.uri, uuidRepresentation="standard", tz_aware=True, event_listeners=[recorder])
    try:
        yield QueueContext.create(settings, client[settings.database], clock=clock), recorder
    finally:
        client.close()


def _mentions(value: Any, word: str) -> bool:
    """Whether `word` is a key or a string anywhere in `value`."""
    if isinstance(value, dict):
        return any(k == word or _mentions(v, word) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_mentions(v, word) for v in value)
    return value == word


def _drive(ctx: QueueContext) -> None:
    """Enqueue (plain, keyed, delayed, a batch), claim, succeed, fail, extend, release,
    reap: the queue's commands."""
    queue = ActivityQueue(ctx)
    queue.enqueue("t", {"n": 1})
    queue.enqueue("t", {"n": 2}, idempotency_key="k1")
    queue.enqueue("t", {"n": 3}, delay_seconds=60)
    queue.enqueue_many([queue_spec(i) for i in range(4)])
    claims = queue.dequeue("w", limit=4)
    assert len(claims) == 4
    queue.ack_success(claims[0], {"ok": 1})
    queue.ack_failure(claims[1], "boom")
    queue.extend_lease(claims[2], 30)
    queue.release(claims[3])
    assert queue.dequeue("w", lease_seconds=5)
    ctx.clock.advance(3600)  # type: ignore[attr-defined]  # the fake clock: leases expire
    assert sum(Maintenance(ctx).requeue_expired().values()) == 2  # the reaper's fence too
    Maintenance(ctx).process_scheduled()


def queue_spec(n: int) -> Any:
    from runnerq_cli.backend.domain.specs import ActivitySpec

    return ActivitySpec("t", {"batch": n})


# Every field today's activity document may have (docs/design.md, "Activity document").
TODAYS_FIELDS = {"_id", "activity_type", "payload", "priority", "status", "created_at",
                 "scheduled_at", "started_at", "completed_at", "worker_id", "lease_id",
                 "lease_deadline", "retry_count", "max_retries", "timeout_seconds",
                 "retry_delay_seconds", "metadata", "last_error", "last_error_at",
                 "idempotency_key", "last_lease_id", "last_outcome", "claims",
                 "last_worker_id", "outbox"}


def test_one_partition_is_todays_queue_on_the_wire_and_in_its_documents(recorded,
                                                                        settings) -> None:
    ctx, recorder = recorded
    Maintenance(ctx).init_indexes()
    _drive(ctx)
    # The only command that names partitions: one read of the count, by _id, on control
    # (init-indexes read it; cached, it is not read again per enqueue or claim).
    naming = [c for c in recorder.commands if _mentions(c, "partition")
              or _mentions(c, PARTITIONS_ID)]
    assert naming == [c for c in recorder.commands
                      if c.get("find") == ctx.names.control
                      and c.get("filter") == {"_id": PARTITIONS_ID}]
    assert len(naming) == 1
    docs = list(ctx.activities.find({}))
    assert len(docs) == 7 and all(set(d) <= TODAYS_FIELDS for d in docs)
    # The index plan of one partition is today's: no index names a partition.
    plan = index_plan(settings)
    assert plan == index_plan(settings, partitions=1)
    assert not any(k == "partition" for spec in plan for k, _ in spec.keys)
    assert ctx.control.find_one({"_id": PARTITIONS_ID}) is None


def test_every_claim_and_fenced_write_of_a_partitioned_queue_targets_its_partition(
        recorded) -> None:
    ctx, recorder = recorded
    Maintenance(ctx).set_partitions(4)
    Maintenance(ctx).init_indexes()
    recorder.commands.clear()
    _drive(ctx)
    activities = ctx.names.activities
    claims = [c for c in recorder.commands if c.get("findAndModify") == activities]
    assert claims and all(isinstance(c["query"].get("partition"), int) for c in claims)
    # the claims are the query doctor explains for a partitioned queue (queries.py)
    from runnerq_cli.backend.domain.queries import partition_claim

    taken = [c for c in claims if "_id" not in c["query"]]
    assert taken and all(c["query"] == partition_claim(c["query"]["partition"]).filter
                         and list(c["sort"].items()) == list(partition_claim(0).sort)
                         for c in taken)
    single = [u for c in recorder.commands if c.get("update") == activities
              for u in c["updates"] if not u.get("multi")]
    # every one-document update (enqueue upserts, acknowledgements) names the whole shard key
    assert single and all(isinstance(u["q"].get("partition"), int) and "_id" in u["q"]
                          for u in single)
    docs = list(ctx.activities.find({}))
    assert len(docs) == 7 and all(d["partition"] in range(4) for d in docs)


def test_keyed_activities_hash_to_a_partition_and_the_others_go_round_robin(queue, partitions
                                                                            ) -> None:
    if partitions == 1:
        Maintenance(queue.context).set_partitions(4)
        queue.context.partitions.forget()
    raw = queue.db[queue.context.names.activities]
    plain = [queue.enqueue("t", {}).activity_id for _ in range(12)]
    spread = Counter(raw.find_one({"_id": aid})["partition"] for aid in plain)
    count = queue.context.partitions.current()
    assert sorted(spread) == list(range(count)) and max(spread.values()) - min(
        spread.values()) <= 1
    for key in ("a", "b", "order-17", "é"):
        aid = queue.enqueue("t", {}, idempotency_key=key).activity_id
        assert raw.find_one({"_id": aid})["partition"] == of_key("t", key, count)
        again = queue.enqueue("t", {}, idempotency_key=key)
        assert not again.created and again.activity_id == aid  # the rule is as exact
    # the hash is the documented one: SHA-256 of type, NUL, key; first 8 bytes, big-endian
    import hashlib
    digest = hashlib.sha256(b"t\x00order-17").digest()
    assert of_key("t", "order-17", 7) == int.from_bytes(digest[:8], "big") % 7


@pytest.mark.parametrize("partitions", [4])
def test_claim_order_holds_within_each_partition(queue, clock) -> None:
    made = {}
    for n in range(16):
        made[queue.enqueue("t", {}, priority=1 + n % 4).activity_id] = n
        clock.advance(1)
    claims = queue.dequeue("w", limit=16)
    assert len(claims) == 16 and queue.dequeue("w") == []
    by_partition: dict[int, list[Any]] = {}
    for claim in claims:
        by_partition.setdefault(claim.activity.partition, []).append(claim.activity)
    for acts in by_partition.values():
        assert [(-a.priority, a.created_at) for a in acts] == sorted(
            (-a.priority, a.created_at) for a in acts)


@pytest.mark.parametrize("partitions", [4])
def test_no_partition_is_starved_and_empty_ones_are_skipped(queue) -> None:
    raw = queue.db[queue.context.names.activities]
    heavy = [queue.enqueue("t", {}).activity_id for _ in range(24)]
    # everything in partition 0, but one activity in partition 3
    raw.update_many({"_id": {"$in": heavy}}, {"$set": {"partition": 0}})
    light = queue.enqueue("t", {}).activity_id
    raw.update_one({"_id": light}, {"$set": {"partition": 3}})
    order = []
    for _ in range(6):
        order += [c.activity_id for c in queue.dequeue("w")]
    assert light in order[:4]  # within N claims of one worker, however busy partition 0 is
    assert len(order) == 6  # empty partitions 1 and 2 cost a claim, not an empty answer


def test_rotation_tries_every_partition_in_n_claims() -> None:
    import random

    rotation = Rotation(random.Random(7))
    seen = [rotation.take(4) for _ in range(8)]
    assert sorted(seen[:4]) == [0, 1, 2, 3] and sorted(seen[4:]) == [0, 1, 2, 3]


@pytest.mark.parametrize("partitions", [4])
def test_workers_racing_over_four_partitions_end_every_activity_exactly_once(backend
                                                                             ) -> None:
    from runnerq_cli.backend.domain.specs import ActivitySpec

    specs = [ActivitySpec("echo", {"n": i}) for i in range(60)]
    ids = [r.activity_id for r in backend.enqueue_many(specs)]
    raw = backend.db[backend.context.names.activities]
    assert {d["partition"] for d in raw.find({}, {"partition": 1})} == {0, 1, 2, 3}
    workers = [Worker(RunnerQ(backend.settings), worker_handlers.registry, burst=True,
                      poll_interval=0.2, concurrency=2) for _ in range(3)]
    handled: Counter[str] = Counter()
    lock = threading.Lock()

    def run(worker: Worker) -> None:
        worker.run(install_signals=False)
        with lock:
            handled["claimed"] += worker.counters["claimed"]
            handled["succeeded"] += worker.counters["succeeded"]

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    docs = {d["_id"]: d for d in raw.find({})}
    assert all(docs[aid]["status"] == "completed" and docs[aid]["claims"] == 1 for aid in ids)
    assert handled == {"claimed": 60, "succeeded": 60}  # each claimed once, ended once
    assert backend.stats()["by_status"]["completed"] == 60  # stats see the queue whole
    # every partition was drained (none starved): 15 each, all completed
    assert Counter(d["partition"] for d in docs.values() if d["status"] == "completed") == {
        0: 15, 1: 15, 2: 15, 3: 15}


@pytest.mark.parametrize("partitions", [4])
def test_readers_see_the_queue_whole(queue, clock) -> None:
    ids = set()
    for _ in range(8):
        ids.add(queue.enqueue("t", {}).activity_id)
        clock.advance(1)
    assert {a.id for a in queue.list_pending(limit=50)} == ids
    assert queue.stats()["by_status"]["pending"] == 8
    # explain counts what is ahead in the activity's own partition (2 each: round robin)
    raw = queue.db[queue.context.names.activities]
    last = max(ids, key=lambda i: raw.find_one({"_id": i})["created_at"])
    why = queue.diagnosis.explain(last)
    part = raw.find_one({"_id": last})["partition"]
    assert why.facts["partition"] == part and why.facts["ahead"] == 1
    assert f"in its partition's claim order (partition {part})" in why.sentence
    claim = queue.dequeue("w")[0]
    assert queue.get_activity(claim.activity_id).partition == claim.activity.partition
    # an operator action by id fences on the document's partition (and works)
    queue.ack_failure(claim, "boom", retryable=False)
    queue.operator.retry(claim.activity_id)
    assert queue.get_activity(claim.activity_id).status == "pending"


def test_the_count_only_grows_and_stamps_activities_without_one(queue) -> None:
    maintenance = queue.maintenance
    before = queue.context.partitions.current()
    old = queue.enqueue("t", {}).activity_id
    raw = queue.db[queue.context.names.activities]
    change = maintenance.set_partitions(max(before, 1) * 2 + 2)
    assert change.after == max(before, 1) * 2 + 2 and change.written
    assert isinstance(raw.find_one({"_id": old})["partition"], int)
    with pytest.raises(InvalidArgument, match="can only grow"):
        maintenance.set_partitions(2)
    assert count_of(queue.context.partitions.read()) == change.after  # nothing written
    with pytest.raises(InvalidArgument, match="from 1 to 256"):
        maintenance.set_partitions(257)


def test_a_malformed_count_stops_enqueues_and_claims_and_doctor_names_it(queue) -> None:
    queue.context.control.replace_one({"_id": PARTITIONS_ID}, {"count": "4"}, upsert=True)
    queue.context.partitions.forget()
    with pytest.raises(MalformedDocument, match="count is '4'"):
        queue.enqueue("t", {})
    with pytest.raises(MalformedDocument):
        queue.dequeue("w")
    check = check_partitions(queue.context, "standalone")
    assert check.status.value == "fail" and "init-indexes --partitions" in str(check.fix)
    queue.maintenance.set_partitions(4)  # the fix
    assert queue.enqueue("t", {}).created


def test_doctor_counts_activities_no_claim_reaches(queue) -> None:
    queue.maintenance.set_partitions(4)
    queue.maintenance.init_indexes()
    raw = queue.db[queue.context.names.activities]
    aid = queue.enqueue("t", {}).activity_id
    raw.update_one({"_id": aid}, {"$unset": {"partition": ""}})  # an old producer's
    other = queue.enqueue("t", {}).activity_id
    raw.update_one({"_id": other}, {"$set": {"partition": 9}})  # another program's
    check = check_partitions(queue.context, "replica set")
    assert check.status.value == "fail"
    assert check.facts["without_partition"] == 1 and check.facts["outside_partitions"] == 1
    queue.maintenance.set_partitions(4)  # run again: stamps the stray
    assert check_partitions(queue.context, "replica set").facts["without_partition"] == 0


def test_doctor_judges_a_sharded_layout() -> None:
    class Names:
        def all(self) -> dict[str, str]:
            return {r: f"runnerq_q_{r}" for r in ("activities", "results", "idempotency",
                                                  "events", "dead_letter", "workers",
                                                  "control")}

    class Db:
        name = "db"

    class Ctx:
        names = Names()
        db = Db()

    def judged(keys: dict[str, Any], zones: int, partitions: int = 4
               ) -> tuple[list[str], list[str]]:
        problems: list[str] = []
        warnings: list[str] = []
        layout = {"shard_keys": keys, "zone_ranges": zones}
        _judge(layout, partitions, problems, warnings, [], Ctx())  # type: ignore[arg-type]
        return problems, warnings

    good = {"activities": {"partition": 1, "_id": 1}, "results": {"_id": "hashed"}}
    assert judged(good, 4) == ([], [])
    assert judged({**good, "workers": {"_id": 1}}, 4)[0] == [
        "workers is sharded (it must stay unsharded)"]
    assert "not {'partition': 1, '_id': 1}" in judged({"activities": {"_id": "hashed"}}, 4)[0][0]
    assert "1 zone range for 4 partitions" in judged(good, 1)[1][0]
    assert "one partition" in judged(good, 4, partitions=1)[0][0]


def test_cli_init_indexes_partitions(run_cli) -> None:
    assert run_cli("enqueue", "t").code == 0
    dry = run_cli("init-indexes", "--partitions", "4", "--dry-run")
    assert dry.code == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == ("partitions: 1 -> 4 (not written); 1 activity "
                                          "would get partition 0")
    done = run_cli("init-indexes", "--partitions", "4", "-o", "json")
    assert done.code == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["partitions"] == {"before": 1, "after": 4, "stamped": 1, "written": True}
    names = {ix["name"] for ix in doc["indexes"] if ix["state"] == "created"}
    assert {"partition_1__id_1",
            "partition_1_priority_-1_created_at_1__id_1_status_1_pending"} <= names
    again = run_cli("init-indexes", "--partitions", "4")
    assert again.code == 0 and again.stdout.splitlines()[0] == "partitions: 4 (unchanged)"
    assert run_cli("init-indexes").code == 0  # the partitioned plan holds without the flag
    fewer = run_cli("init-indexes", "--partitions", "2")
    assert fewer.code == ExitCode.USAGE and fewer.stdout == ""
    assert len(fewer.stderr.strip().splitlines()) == 1 and "only grow" in fewer.stderr
    bad = run_cli("init-indexes", "--partitions", "0")
    assert bad.code == ExitCode.USAGE and "from 1 to 256" in bad.stderr
    doctor = run_cli("doctor", "-o", "json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["partitions"]["status"] == "ok"
    assert checks["partitions"]["message"].startswith("4 partitions")
    assert checks["indexes"]["status"] == "ok"
    shown = run_cli("show", str(_first_id(run_cli)), "-o", "json")
    assert json.loads(shown.stdout)["activity"]["partition"] == 0


def _first_id(run_cli: Any) -> uuid.UUID:
    listed = json.loads(run_cli("list", "pending", "-o", "json").stdout)
    return uuid.UUID(listed["items"][0]["id"])


def test_enqueue_from_and_dlq_import_choose_partitions(run_cli, settings, tmp_path) -> None:
    source = RunnerQ(settings)
    source.maintenance.set_partitions(4)
    jobs = tmp_path / "jobs.ndjson"
    jobs.write_text("".join(json.dumps({"type": "t", "payload": {"n": n}}) + "\n"
                            for n in range(8))
                    + json.dumps({"type": "t", "payload": {}, "idempotency_key": "k"}) + "\n")
    res = run_cli("enqueue", "--from", str(jobs), "-q")
    assert res.code == 0, res.stderr
    raw = source.context.activities
    spread = Counter(d["partition"] for d in raw.find({"idempotency_key": None}))
    assert spread == {0: 2, 1: 2, 2: 2, 3: 2}  # round robin within the batch
    keyed = raw.find_one({"idempotency_key": "k"})
    assert keyed["partition"] == of_key("t", "k", 4)
    dead = source.enqueue("d", {}, max_retries=1).activity_id
    source.ack_failure(source.dequeue("w", types=["d"])[0], "boom")
    out = tmp_path / "dead.ndjson"
    assert run_cli("dlq", "export", "-o", str(out)).code == 0
    env = {"RUNNERQ_QUEUE": "staging"}
    assert run_cli("init-indexes", "--partitions", "4", env=env).code == 0
    imported = run_cli("dlq", "import", str(out), "-o", "jsonl", env=env)
    assert imported.code == 0, imported.stderr
    [row] = [json.loads(line) for line in imported.stdout.splitlines()]
    copy = source.db["runnerq_staging_activities"].find_one({"_id": uuid.UUID(row["id"])})
    # a new document, its partition chosen afresh: the import's key is the original id
    assert copy["partition"] == of_key("d", str(dead), 4)


def test_a_claim_of_many_asks_an_empty_partition_once(recorded) -> None:
    ctx, recorder = recorded
    Maintenance(ctx).set_partitions(4)
    Maintenance(ctx).init_indexes()
    queue = ActivityQueue(ctx)
    ids = [queue.enqueue("t", {}).activity_id for _ in range(6)]
    ctx.activities.update_many({"_id": {"$in": ids}}, {"$set": {"partition": 2}})
    recorder.commands.clear()
    assert len(queue.dequeue("w", limit=8)) == 6
    asked = [c["query"]["partition"] for c in recorder.commands
             if c.get("findAndModify") == ctx.names.activities]
    # six claims of partition 2, one that found it empty at the end, one of each other
    assert Counter(asked) == {2: 7, 0: 1, 1: 1, 3: 1}


def test_cli_on_a_malformed_count_is_one_line_and_writes_nothing(run_cli, settings) -> None:
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    backend.context.control.insert_one({"_id": PARTITIONS_ID, "count": 0})
    res = run_cli("enqueue", "t")
    assert res.code == ExitCode.FAILURE and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: control document 'partitions': count is 0, not an int from 1 to 256; fix it "
        "with init-indexes --partitions N"]
    assert backend.context.activities.count_documents({}) == 0
    fixed = run_cli("init-indexes", "--partitions", "2")
    assert fixed.code == 0 and fixed.stdout.startswith("partitions: malformed -> 2")
    assert run_cli("enqueue", "t").code == 0


@pytest.mark.parametrize("partitions", [4])
def test_a_null_partition_is_a_stray_that_init_indexes_stamps(queue) -> None:
    """doctor counts a null `partition` with the absent ones, and its fix (run
    init-indexes --partitions N again) stamps both (design.md, "Changing N")."""
    raw = queue.db[queue.context.names.activities]
    aid = queue.enqueue("t", {}).activity_id
    raw.update_one({"_id": aid}, {"$set": {"partition": None}})
    assert check_partitions(queue.context, "replica set").facts["without_partition"] == 1
    queue.maintenance.set_partitions(4)
    assert raw.find_one({"_id": aid})["partition"] == 0
    assert check_partitions(queue.context, "replica set").facts["without_partition"] == 0


def test_the_documented_partition_of_a_key() -> None:
    """docs/design.md's worked example of the hash (The `partition` field)."""
    assert of_key("email", "order-17", 4) == 0 and of_key("email", "order-18", 4) == 3


def test_an_idle_claimer_of_four_partitions_asks_once_per_poll(recorded) -> None:
    """Once every partition was found empty, the next claim first asks whether any
    partition has work (one find), and claims partition by partition only when one has:
    an idle poll is one command, not one empty claim per partition."""
    ctx, recorder = recorded
    Maintenance(ctx).set_partitions(4)
    Maintenance(ctx).init_indexes()
    queue = ActivityQueue(ctx)
    assert queue.dequeue("w") == []  # the first idle poll: each partition once

    def sent() -> Counter[str]:  # the commands on the activities (not the count's reads)
        return Counter(next(iter(c)) for c in recorder.commands
                       if next(iter(c)) in ("find", "findAndModify")
                       and c[next(iter(c))] == ctx.names.activities)

    recorder.commands.clear()
    for _ in range(3):
        assert queue.dequeue("w") == []
    assert sent() == {"find": 3}  # the probe alone, however many partitions
    aid = queue.enqueue("t", {}).activity_id
    recorder.commands.clear()
    [claim] = queue.dequeue("w")  # work in some partition: the probe, then the claims
    assert claim.activity_id == aid
    assert sent()["find"] == 1 and 1 <= sent()["findAndModify"] <= 4
    recorder.commands.clear()
    assert queue.dequeue("w") == []  # it had work last time: claims again, then dry
    assert sent() == {"findAndModify": 4}


@pytest.mark.parametrize("stray", [{"partition": 7}, {"partition": -1}, {"partition": None},
                                   {}, {"partition": "1"}])
def test_a_stray_that_no_claim_takes_keeps_an_idle_claimer_idle(recorded, stray) -> None:
    """A pending activity outside every partition's claim (no partition, one beyond the
    count, text) is never claimed, so the probe does not find it either: an idle poll
    stays one find, never N empty claims at every poll."""
    ctx, recorder = recorded
    Maintenance(ctx).set_partitions(4)
    Maintenance(ctx).init_indexes()
    queue = ActivityQueue(ctx)
    raw = ctx.activities
    aid = queue.enqueue("t", {}).activity_id
    raw.update_one({"_id": aid}, {"$unset": {"partition": ""}} if not stray
                   else {"$set": stray})
    assert queue.dequeue("w") == []  # the first idle poll: each partition once
    recorder.commands.clear()
    for _ in range(3):
        assert queue.dequeue("w") == []
    sent = Counter(next(iter(c)) for c in recorder.commands
                   if next(iter(c)) in ("find", "findAndModify")
                   and c[next(iter(c))] == ctx.names.activities)
    assert sent == {"find": 3}
    assert raw.find_one({"_id": aid})["status"] == "pending"  # left for doctor
    good = queue.enqueue("t", {}).activity_id  # and real work is still seen at once
    [claim] = queue.dequeue("w")
    assert claim.activity_id == good


def test_doctor_explains_the_idle_probe_the_claimer_sends(recorded, clock) -> None:
    """The idle probe is a find of one `_id`, no sort (design.md, "How a worker spreads
    over partitions"): doctor's explain of it must be that query. With the claims' sort
    kept, doctor explained a sorted $in over every partition, which MongoDB can only
    merge-sort up to 200 index points: past that (256 partitions, or 101 with two
    types) it reported an in-memory sort of a query the code never sorts."""
    from runnerq_cli.backend.diagnosis.plans import explain_query
    from runnerq_cli.backend.domain.queries import representative_queries

    ctx, recorder = recorded
    Maintenance(ctx).set_partitions(4)
    Maintenance(ctx).init_indexes()
    queue = ActivityQueue(ctx)
    assert queue.dequeue("w") == []  # dry: the next poll probes
    recorder.commands.clear()
    assert queue.dequeue("w") == []
    [sent] = [c for c in recorder.commands
              if next(iter(c)) == "find" and c["find"] == ctx.names.activities]
    [probe] = [q for q in representative_queries(ctx.settings, clock(), partitions=4)
               if q.name.startswith("any claimable") and "activity_type" not in q.filter]
    recorder.commands.clear()
    explain_query(ctx.db, ctx.names, ctx.settings, probe)
    [explained] = [c["explain"] for c in recorder.commands if next(iter(c)) == "explain"]
    assert explained["filter"] == sent["filter"]
    assert explained.get("sort") == sent.get("sort") is None, (explained, sent)

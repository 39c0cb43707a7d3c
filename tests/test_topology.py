"""Topology proofs for the public workflow (.github/workflows/ci.yml): every activity
ends exactly once on a real deployment while its primary steps down, or on a sharded
cluster, checked against a history of every claim and acknowledgement.

Pointed at a deployment by RUNNERQ_TOPOLOGY_URI (a replica set or a mongos;
CONTRIBUTING.md, "Every topology with Docker") with RUNNERQ_TOPOLOGY naming the case:
`stepdown` (the primary is stepped down twice while two worker processes drain the
queue), `sharded` (a queue of 4 partitions whose activities collection is sharded on
{partition: 1, _id: 1} first, one zone of two partitions per shard; each partition's
claim must go to its one shard) or `plain` (the same check on any server: the
standalone and the authenticated jobs). Without them it runs on the suite's own server
with fewer activities, behind a proxy that simulates the stepdowns (for 2 s every
command is answered "not primary", as a member that stepped down answers it, then
"host unreachable", as a mongos that lost a shard): the proof's harness (the history,
the tail's count, the followers) and the code's handling of those answers are proven
wherever the suite runs, before a public run depends on them.

The history: each attempt's handler appends `claim ID ATTEMPT PID` to a file
(tests/topology_handlers.py); each worker's JSON log records every acknowledged outcome.
Exactly once means: every activity completed, one result and one Completed event each,
one `completed` acknowledgement each in all the workers' logs, and every acknowledgement
of an activity preceded by a claim of it in the history.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import http_get
from tests.stalling_proxy import SteppingDownProxy

URI = os.environ.get("RUNNERQ_TOPOLOGY_URI", "")
CASE = os.environ.get("RUNNERQ_TOPOLOGY", "")
pytestmark = [
    pytest.mark.proof,
    pytest.mark.skipif(bool(URI) and CASE not in ("stepdown", "sharded", "plain"),
                       reason="RUNNERQ_TOPOLOGY_URI needs RUNNERQ_TOPOLOGY="
                              "stepdown|sharded|plain (the public workflow sets both)"),
]
ROOT = Path(__file__).resolve().parent.parent
COUNT = int(os.environ.get("RUNNERQ_TOPOLOGY_ACTIVITIES", "300"))
PARTITIONS = 4  # the sharded case's queue: two partitions per shard
TOKEN = "topology-console-token-0123456789"
QUEUE = "topology"


def _shard(client: Any, database: str) -> dict[int, str]:
    """The activities collection sharded on {partition: 1, _id: 1} (docs/design.md's
    shard key of a partitioned queue), before anything is written to it, with the
    layout design.md asks for on 7.0 ("Sharding a partitioned queue"): one zone per
    shard, each holding whole partitions (4 on 2 shards: two each), set before the
    collection is sharded so that its first chunks follow the zones. Returns the shard
    meant to own each partition."""
    from bson import MinKey

    name = f"runnerq_{QUEUE}_activities"
    namespace = f"{database}.{name}"
    client.admin.command("enableSharding", database)
    shards = sorted(s["_id"] for s in client.admin.command("listShards")["shards"])
    assert PARTITIONS % len(shards) == 0, (PARTITIONS, shards)
    per_shard = PARTITIONS // len(shards)
    owners: dict[int, str] = {}
    for n, shard in enumerate(shards):
        zone = f"runnerq-{n}"
        client.admin.command("addShardToZone", shard, zone=zone)
        client.admin.command(
            "updateZoneKeyRange", namespace, zone=zone,
            min={"partition": n * per_shard, "_id": MinKey()},
            max={"partition": (n + 1) * per_shard, "_id": MinKey()})
        owners.update({p: shard for p in range(n * per_shard, (n + 1) * per_shard)})
    client[database][name].create_index([("partition", 1), ("_id", 1)])
    client.admin.command("shardCollection", namespace, key={"partition": 1, "_id": 1})
    return owners


def _shards_named(value: Any) -> set[str]:
    """Every `shardName` in a mongos explain (its winning plan lists the shards the
    command goes to), wherever the version nests it."""
    if isinstance(value, dict):
        found = {value["shardName"]} if isinstance(value.get("shardName"), str) else set()
        return found.union(*(_shards_named(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_shards_named(v) for v in value))
    return set()


def _check_routing(client: Any, database: str, owners: dict[int, str]) -> None:
    """Every partition's claim goes to the one shard that owns the partition (a
    findAndModify with the shard key's prefix: what MongoDB 7.0 requires), and the
    queue's activities are spread over every partition."""
    from runnerq_cli.backend.domain import queries

    name = f"runnerq_{QUEUE}_activities"
    for partition, owner in owners.items():
        claim = queries.claim(partition=partition)
        plan = client[database].command(
            "explain", {"findAndModify": name, "query": claim.filter,
                        "sort": dict(claim.sort), "update": {"$set": {"probe": 1}}},
            verbosity="queryPlanner")
        assert _shards_named(plan.get("queryPlanner", plan)) == {owner}, (partition, plan)
    spread = collections.Counter(
        d.get("partition") for d in client[database][name].find({}, {"partition": 1}))
    assert set(spread) == set(owners), spread  # every activity in a partition, each used


def _replset_step_down(client: Any) -> str:
    """Step a real primary down (an election follows)."""
    from pymongo.errors import AutoReconnect, OperationFailure

    try:
        client.admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=5)
    except AutoReconnect:
        pass  # the primary closes its connections as it steps down
    except OperationFailure as exc:
        return f"refused: {exc}"
    return "stepped down"


def _step_down_twice(step_down: Callable[[], str], stop: threading.Event,
                     completed: Callable[[], int], count: int) -> list[str]:
    """Step the primary down twice, once a third and once two thirds are done."""
    done: list[str] = []
    for share in (1 / 3, 2 / 3):
        while not stop.is_set() and completed() < count * share:
            time.sleep(0.05)
        if stop.is_set():
            break
        done.append(step_down())
    return done


def _line(out: Path, needle: str) -> str:
    """The first line of a command's output that holds `needle`, waiting for it (a
    server's address once it listens, stats' first view)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = [line for line in out.read_text().splitlines() if needle in line]
        if lines:
            return lines[0]
        time.sleep(0.2)
    raise AssertionError(f"no {needle!r} in {out.name}: {out.read_text()[-2000:]}")


def _get(url: str) -> tuple[int, str]:
    return http_get(url, TOKEN)


@dataclass(frozen=True)
class Deployment:
    uri: str  # the test's own reads and checks
    case: str
    count: int  # activities to drain
    served: str  # the URI of the processes under test
    # One stepdown of the primary, given the test's client ("stepped down" or why not);
    # None: the case steps nothing down.
    step_down: Callable[[Any], str] | None
    proxy: SteppingDownProxy | None = None  # the simulated stepdown's: what it refused


@pytest.fixture
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """RUNNERQ_TOPOLOGY_URI with its case (the public workflow), else the suite's own
    server behind a SteppingDownProxy (two stepdowns simulated: for 2 s every command
    is answered "not primary", then "a shard is unreachable"), with fewer activities
    (the dev server takes about 100 a second)."""
    if URI:
        yield Deployment(URI, CASE, COUNT, URI,
                         _replset_step_down if CASE == "stepdown" else None)
        return
    uri = request.getfixturevalue("server").uri
    proxy = SteppingDownProxy(uri)
    # The first as a member answers it, the second as a mongos that lost a shard.
    answers = iter(("member", "unreached"))
    try:
        yield Deployment(uri, "simulated stepdown", 60, proxy.uri(uri),
                         lambda _client: proxy.step_down(
                             2.0, answering=next(answers, "member")), proxy)
    finally:
        proxy.close()


def test_every_activity_ends_exactly_once(tmp_path: Path, deployment: Deployment) -> None:
    from pymongo import MongoClient

    from runnerq_cli import connect

    database = f"topology_{uuid.uuid4().hex[:8]}"
    history = tmp_path / "history.txt"
    client: MongoClient[dict[str, Any]] = MongoClient(deployment.uri, uuidRepresentation="standard")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")},
           "RUNNERQ_MONGO_URI": deployment.served, "RUNNERQ_DATABASE": database,
           "RUNNERQ_QUEUE": QUEUE,
           "TOPOLOGY_HISTORY_FILE": str(history), "PYTHONPATH": str(ROOT),
           "RUNNERQ_CONSOLE_TOKEN": TOKEN}
    workers: list[subprocess.Popen[str]] = []
    followers: dict[str, subprocess.Popen[str]] = {}
    try:
        owners: dict[int, str] = {}
        queue = connect(deployment.uri, database=database, queue=QUEUE)
        if deployment.case == "sharded":  # a partitioned queue on its sharded collection
            owners = _shard(client, database)
            queue.maintenance.set_partitions(PARTITIONS)
        queue.maintenance.init_indexes()
        # On a real replica set 300 activities of 20 ms drain in about a second: 100 ms
        # each (about 4 s on 8 slots) puts both stepdowns in the middle of the work.
        seconds = 0.1 if deployment.case == "stepdown" else 0.02
        ids = {str(queue.enqueue("record", {"n": n, "seconds": seconds}).activity_id)
               for n in range(deployment.count)}
        # Long-running commands ride the stepdown out (domain/outage.py): a tail that
        # prints every event once, stats --watch, metrics serve and the console; all
        # still running and answering at the end.
        for name, args in (("tail", ("tail", "events", "--since", "1h", "-o", "jsonl")),
                           ("stats", ("stats", "--watch", "--interval", "1s")),
                           ("metrics", ("metrics", "serve", "--port", "0",
                                        "--min-interval", "0s")),
                           ("console", ("console", "--port", "0"))):
            with open(tmp_path / f"{name}.out", "w") as out:  # (the child keeps its copy)
                followers[name] = subprocess.Popen(
                    [sys.executable, "-m", "runnerq_cli", *args], cwd=ROOT, env=env,
                    stdout=out, stderr=subprocess.STDOUT, text=True)
        workers += followers.values()  # (killed at the end whatever happens)
        # Each has answered once before anything steps down: a command whose very first
        # read fails exits with its code at once (the one-shot rule, domain/outage.py).
        _line(tmp_path / "stats.out", "refresh 1")
        _line(tmp_path / "metrics.out", "http://")
        _line(tmp_path / "console.out", "http://")
        logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
        for log in logs:
            with open(log, "w") as out:
                workers.append(subprocess.Popen(
                    [sys.executable, "-m", "runnerq_cli", "worker", "--app",
                     "tests.topology_handlers", "--burst", "--concurrency", "4",
                     "--lease", "5s", "--poll-interval", "0.2s", "--log-format", "json"],
                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True))
        activities = client[database][f"runnerq_{QUEUE}_activities"]
        stop = threading.Event()
        stepdowns: list[str] = []
        step_down = deployment.step_down
        if step_down is not None:
            def completed() -> int:
                try:
                    return activities.count_documents({"status": "completed"})
                except Exception:  # an election: ask again
                    return 0

            thread = threading.Thread(target=lambda: stepdowns.extend(_step_down_twice(
                lambda: step_down(client), stop, completed, deployment.count)), daemon=True)
            thread.start()
        for proc in workers[len(followers):]:
            assert proc.wait(timeout=600) == 0, "".join(log.read_text() for log in logs)
        stop.set()
        if step_down is not None:
            thread.join(30)
            assert stepdowns.count("stepped down") >= 1, stepdowns
        if deployment.proxy is not None:  # the workers met it: claims and writes refused
            refused = deployment.proxy.refused
            print("refused while stepped down:", refused)
            assert refused.get("findAndModify", 0) + refused.get("update", 0) > 0, refused

        # The history: every claim (the handler's lines), every acknowledgement (the logs).
        claims: dict[str, int] = collections.Counter()
        for line in history.read_text().splitlines():
            _kind, aid, _attempt, _pid = line.split()
            claims[aid] += 1
        acks: dict[str, list[str]] = collections.defaultdict(list)
        for log in logs:
            for line in log.read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("event") == "activity":
                    acks[record["activity_id"]].append(record["outcome"])
        assert set(claims) == ids, "an activity was never claimed"
        for aid in ids:
            assert acks[aid].count("completed") == 1, (aid, acks[aid], claims[aid])
            assert len(acks[aid]) <= claims[aid], (aid, acks[aid], claims[aid])

        # The tail printed each activity's Completed once, across the elections.
        def tailed() -> collections.Counter[str]:
            found: collections.Counter[str] = collections.Counter()
            for line in (tmp_path / "tail.out").read_text().splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a note: the outage noted on the same stream
                if event.get("event_type") == "Completed":
                    found[event["activity_id"]] += 1
            return found

        deadline = time.monotonic() + 120
        while set(tailed()) != ids and time.monotonic() < deadline:
            time.sleep(0.5)
        assert set(tailed()) == ids and set(tailed().values()) == {1}
        scrape = _line(tmp_path / "metrics.out", "http://").split(" on ")[1].strip()
        page = _line(tmp_path / "console.out", "http://").split(": ", 1)[1].strip()
        api = page.split("?")[0] + "api/stats"
        scraped = f'runnerq_scrape_success{{queue="{QUEUE}"}} 1.0'
        deadline = time.monotonic() + 60  # both answer from the primary now in office
        while time.monotonic() < deadline and not (
                _get(api)[0] == 200 and scraped in _get(scrape)[1]):
            time.sleep(0.5)
        assert _get(api)[0] == 200, _get(api)
        assert scraped in _get(scrape)[1], _get(scrape)
        for name, proc in followers.items():
            assert proc.poll() is None, name  # still following
            proc.terminate()
            assert proc.wait(30) == 0, (tmp_path / f"{name}.out").read_text()[-3000:]

        if deployment.case == "sharded":
            _check_routing(client, database, owners)

        # The server's side: one terminal transition each, as users see it.
        docs = list(activities.find({}, {"status": 1}))
        assert len(docs) == deployment.count and {d["status"] for d in docs} == {"completed"}
        assert client[database][f"runnerq_{QUEUE}_results"].count_documents({}) == deployment.count
        for aid in ids:
            shown = [e.event_type for e in queue.get_activity_events(aid)]
            assert shown.count("Completed") == 1, (aid, shown)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
        client.drop_database(database)
        client.close()

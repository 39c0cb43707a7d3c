"""Dead-letter export and import: a set moves to another queue and replays; re-import is a no-op."""

from __future__ import annotations

import json
import uuid

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.config import load_settings
from tests.helpers import drive_to, snapshot


@pytest.fixture
def cq(settings, cli_env) -> RunnerQ:
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


@pytest.fixture
def staging(server, db_name) -> RunnerQ:
    settings = load_settings(None, overrides={"uri": server.uri, "database": db_name,
                                              "queue": "staging"},
                             environ={"RUNNERQ_CONFIG": ""})
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


def dead(q: RunnerQ, activity_type: str = "charge", **options) -> uuid.UUID:
    return drive_to(q, "dead_letter", activity_type, payload=options.pop("payload", {"n": 1}),
                    error="gateway said no to {id}", **options)


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_import_round_trip(run_cli, cq: RunnerQ, staging: RunnerQ, tmp_path) -> None:
    originals = [dead(cq, payload={"n": 1}, priority="high", metadata={"tenant": "a"}),
                 dead(cq, payload={"n": 2}, timeout_seconds=30, retry_delay_seconds=0),
                 dead(cq, "refund", payload={"n": 3})]
    other = cq.enqueue("charge", {}).activity_id
    cq.ack_failure(cq.dequeue("w1")[0], "no", retryable=False)  # failed: not exported
    before = snapshot(cq)
    out = tmp_path / "dead.ndjson"
    res = run_cli("dlq", "export", "-o", str(out))
    assert res.code == 0, res.stderr
    assert "exported 3" in res.stderr
    assert snapshot(cq) == before  # exporting changes nothing
    exported = lines(out)
    assert [e["original_id"] for e in exported] == [str(a) for a in originals]
    first = exported[0]
    assert (first["type"], first["payload"], first["priority"], first["metadata"]) == (
        "charge", {"n": 1}, "high", {"tenant": "a"})
    assert first["error"] == f"gateway said no to {originals[0]}"
    assert (first["attempts"], first["queue"], first["status"]) == (1, "tests", "dead_letter")
    assert first["created_at"] and first["dead_lettered_at"]
    assert (exported[1]["timeout"], exported[1]["retry_delay"]) == (30, 0)
    assert str(other) not in out.read_text()

    env = {"RUNNERQ_QUEUE": "staging"}
    dry = run_cli("dlq", "import", str(out), "--dry-run", "-o", "json", env=env)
    assert dry.code == 0, dry.stderr
    assert json.loads(dry.stdout)["counts"] == {"would_enqueue": 3}
    assert staging.context.activities.count_documents({}) == 0

    res = run_cli("dlq", "import", str(out), "--reason", "replay", "-o", "jsonl", env=env)
    assert res.code == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["outcome"] for r in rows] == ["enqueued"] * 3
    for row, original in zip(rows, originals, strict=True):
        copy = staging.get_activity(row["id"])
        source = cq.get_activity(original)
        assert copy.metadata == {**source.metadata, "redriven_from": str(original)}
        assert (copy.activity_type, copy.payload, copy.priority, copy.max_retries,
                copy.timeout_seconds, copy.retry_delay_seconds) == (
            source.activity_type, source.payload, source.priority, source.max_retries,
            source.timeout_seconds, source.retry_delay_seconds)
        assert copy.status == "pending" and copy.idempotency_key == str(original)
    again = run_cli("dlq", "import", str(out), "-o", "json", env=env)
    assert again.code == 0
    assert json.loads(again.stdout)["counts"] == {"existing": 3}
    assert staging.context.activities.count_documents({}) == 3
    entry = staging.audit_log.audit()[0]
    assert (entry.action, entry.count, entry.reason) == ("dlq-import", 3, "replay")
    assert len(staging.audit_log.audit()) == 1  # the second import did nothing, so no record


def test_enqueue_from_reads_an_export(run_cli, cq: RunnerQ, tmp_path) -> None:
    dead(cq)
    out = tmp_path / "dead.ndjson"
    assert run_cli("dlq", "export", "-o", str(out)).code == 0
    res = run_cli("enqueue", "--from", str(out), "-o", "json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["enqueued"] == 1
    typo = tmp_path / "typo.ndjson"
    typo.write_text('{"type": "charge", "priorty": "high"}\n')
    res = run_cli("enqueue", "--from", str(typo))
    assert res.code == ExitCode.USAGE and "unknown field 'priorty'" in res.stdout


def test_import_redrive_revives_the_originals(run_cli, cq: RunnerQ, tmp_path) -> None:
    ids = [dead(cq), dead(cq)]
    out = tmp_path / "dead.ndjson"
    assert run_cli("dlq", "export", "-o", str(out)).code == 0
    before = snapshot(cq)
    dry = run_cli("dlq", "import", str(out), "--redrive", "--dry-run")
    assert dry.code == 0 and "2 would redrive (dry run: nothing written)" in dry.stdout
    assert snapshot(cq) == before
    res = run_cli("dlq", "import", str(out), "--redrive", "--actor", "ana")
    assert res.code == 0, res.stderr
    for aid in ids:
        act = cq.get_activity(aid)
        assert (act.status, act.retry_count) == ("pending", 0)
        event = cq.get_activity_events(aid)[0]
        assert (event.event_type, event.detail["actor"]) == ("Redriven", "ana")
    assert cq.context.dead_letter.count_documents({}) == 0
    assert cq.context.activities.count_documents({}) == 2  # no copies
    again = run_cli("dlq", "import", str(out), "--redrive", "-o", "json")
    assert again.code == 0
    assert json.loads(again.stdout)["counts"] == {"skipped": 2}
    missing = tmp_path / "missing.ndjson"
    missing.write_text(json.dumps({"type": "charge", "original_id": str(uuid.uuid4())}) + "\n")
    res = run_cli("dlq", "import", str(missing), "--redrive")
    assert res.code == ExitCode.NOT_FOUND
    assert "not found" in res.stdout and res.stderr.startswith("error: 1 of 1 line not imported")


def test_a_bad_line_does_not_stop_the_others(run_cli, cq: RunnerQ, tmp_path) -> None:
    path = tmp_path / "mixed.ndjson"
    good = {"type": "charge", "payload": {"n": 1}, "original_id": str(uuid.uuid4())}
    path.write_text("\n".join([
        json.dumps(good),
        "{not json",
        json.dumps({"type": "charge", "original_id": "not-a-uuid"}),
        json.dumps({"payload": {}}),
        json.dumps({**good, "original_id": str(uuid.uuid4()), "priority": "urgent"}),
        json.dumps({"type": "charge", "payload": {"n": 2}}),  # hand-written: no link
    ]) + "\n")
    res = run_cli("dlq", "import", str(path), "-o", "json")
    assert res.code == ExitCode.USAGE
    report = json.loads(res.stdout)
    assert [r["outcome"] for r in report["results"]] == [
        "enqueued", "invalid", "invalid", "invalid", "invalid", "enqueued"]
    assert [r["line"] for r in report["results"]] == [1, 2, 3, 4, 5, 6]
    assert "priority" in report["results"][4]["reason"]
    assert res.stderr.startswith("error: 4 of 6 lines not imported")
    assert cq.context.activities.count_documents({}) == 2


def test_export_filters_and_aged_out_records(queue: RunnerQ, clock) -> None:
    a = dead(queue)
    clock.advance(60)
    b = dead(queue, "refund")
    since = clock.now
    assert [x["original_id"] for x in queue.dead_letters.dlq_export(types=["refund"])] == [str(b)]
    assert [x["original_id"] for x in queue.dead_letters.dlq_export(since=since)] == [str(b)]
    assert [x["original_id"] for x in queue.dead_letters.dlq_export(max_count=1)] == [str(a)]
    # Retention removes the activities; their dead-letter records are still exported.
    queue.flush_outbox()
    clock.advance(queue.settings.retention_failed + 1)
    assert queue.maintenance.purge_expired()["failed"] == 2
    gone = list(queue.dead_letters.dlq_export())
    assert [x["original_id"] for x in gone] == [str(a), str(b)]
    assert gone[0]["error"] == f"gateway said no to {a}"


@pytest.mark.parametrize("args", [
    ["dlq", "export", "-o", "/nonexistent-dir/x.ndjson"],
    ["dlq", "export", "--max", "0"],
    ["dlq", "export", "--since", "whenever"],
    ["dlq", "import", "/nonexistent-file.ndjson"],
    ["dlq", "import", "{file}", "--reason", "x" * 5000],
])
def test_bad_input(run_cli, cq: RunnerQ, tmp_path, args: list[str]) -> None:
    dead(cq)
    path = tmp_path / "in.ndjson"
    path.write_text('{"type": "t"}\n')
    before = snapshot(cq)
    res = run_cli(*[a.replace("{file}", str(path)) for a in args])
    assert res.code == ExitCode.USAGE, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert snapshot(cq) == before

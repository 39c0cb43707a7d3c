"""`audit`: what operators did, newest first, with actor, reason, count and ids."""

from __future__ import annotations

import getpass
import json
from datetime import datetime

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.exits import ExitCode


@pytest.fixture
def cq(settings, cli_env) -> RunnerQ:
    backend = RunnerQ(settings)
    backend.maintenance.init_indexes()
    return backend


def test_audit_lists_actions_with_reason_and_actor(run_cli, cq: RunnerQ) -> None:
    ids = [cq.enqueue("mail", {}).activity_id for _ in range(3)]
    assert run_cli("cancel", str(ids[0]), "--reason", "duplicate", "--actor", "ana").code == 0
    assert run_cli("cancel", "--type", "mail", "--max", "5", "--yes",
                   "--reason", "mail server down").code == 0
    assert run_cli("delete", "--type", "mail", "--max", "1", "--yes", "--actor", "bob").code == 0
    assert run_cli("pause", "--type", "mail", "--reason", "smtp", "--actor", "ana").code == 0

    res = run_cli("audit", "-o", "json")
    assert res.code == 0, res.stderr
    actions = json.loads(res.stdout)["actions"]
    assert [a["action"] for a in actions] == ["pause", "delete", "cancel", "cancel"]
    pause, delete, bulk, single = actions
    assert (single["actor"], single["reason"], single["count"], single["ids"]) == (
        "ana", "duplicate", 1, [str(ids[0])])
    assert (bulk["actor"], bulk["reason"], bulk["count"]) == (
        getpass.getuser(), "mail server down", 2)
    assert set(bulk["ids"]) == {str(ids[1]), str(ids[2])}
    assert bulk["detail"]["filter"] == {"type": ["mail"],
                                        "status": ["pending", "scheduled", "waiting"]}
    assert (delete["actor"], delete["count"], delete["ids"]) == ("bob", 1, [str(ids[0])])
    assert (pause["actor"], pause["reason"], pause["detail"]["types"]) == ("ana", "smtp",
                                                                            ["mail"])
    stamps = [a["timestamp"] for a in actions]
    assert stamps == sorted(stamps, reverse=True)

    by_ana = json.loads(run_cli("audit", "--actor", "ana", "-o", "json").stdout)["actions"]
    assert [a["action"] for a in by_ana] == ["pause", "cancel"]
    deletes = run_cli("audit", "--action", "delete", "-o", "jsonl").stdout.splitlines()
    assert [json.loads(line)["action"] for line in deletes] == ["delete"]
    assert json.loads(run_cli("audit", "--since", "2999-01-01", "-o", "json").stdout) == {
        "actions": []}
    text = run_cli("audit").stdout
    assert "reason='mail server down'" in text and "delete" in text and "bob" in text


def test_audit_records_live_as_long_as_events(cq: RunnerQ) -> None:
    cq.control.pause()
    record = cq.context.events.find_one({"event_type": "Paused"})
    assert record["activity_id"] is None and isinstance(record["timestamp"], datetime)
    ttl = [ix for ix in cq.context.events.list_indexes()
           if dict(ix["key"]) == {"timestamp": 1}]
    assert ttl and ttl[0]["expireAfterSeconds"] == int(cq.settings.events_ttl)


def test_redrive_and_purge_are_audited(run_cli, cq: RunnerQ) -> None:
    aid = cq.enqueue("job", {}, max_retries=1).activity_id
    cq.ack_failure(cq.dequeue("w")[0], "boom")
    assert run_cli("redrive", "--yes", "--reason", "fixed").code == 0
    cq.operator.cancel(aid)
    env = {"RUNNERQ_RETENTION_FAILED": "1ms"}
    assert run_cli("purge", "--yes", "--actor", "ops", env=env).code == 0
    entries = cq.audit_log.audit()
    assert [(e.action, e.count) for e in entries[:2]] == [("purge", 1), ("redrive", 1)]
    assert entries[0].detail["purged"] == {"completed": 0, "failed": 1}
    assert entries[1].reason == "fixed" and entries[1].ids == [str(aid)]


@pytest.mark.parametrize("args", [["audit", "--since", "soonish"],
                                  ["audit", "--limit", "0"]])
def test_audit_bad_input(run_cli, cq: RunnerQ, args: list[str]) -> None:
    res = run_cli(*args)
    assert res.code == ExitCode.USAGE
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1

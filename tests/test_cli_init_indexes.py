"""`runnerq-mongo init-indexes`: create, re-run, --check, --dry-run, conflicts."""

from __future__ import annotations

import json

import pytest
from pymongo import MongoClient

from runnerq_cli.backend.domain.index_specs import index_plan
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.config import Settings

PLANNED = len(index_plan(Settings()))


@pytest.fixture
def db(server, db_name):
    with MongoClient(server.uri, uuidRepresentation="standard") as client:
        yield client[db_name]


def _json(result) -> dict:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def test_creates_then_reports_present(run_cli, db) -> None:
    first = _json(run_cli("init-indexes", "-o", "json"))
    assert first["ok"] is True and first["mode"] == "write"
    assert {ix["state"] for ix in first["indexes"]} == {"created"}
    assert len(first["indexes"]) == PLANNED
    assert {c["state"] for c in first["collections"]} == {"created"}
    names = set(db.list_collection_names())
    assert {"runnerq_tests_activities", "runnerq_tests_events", "runnerq_tests_results",
            "runnerq_tests_idempotency", "runnerq_tests_dead_letter"} <= names
    index_info = db["runnerq_tests_activities"].index_information()
    claim_index = index_info["priority_-1_created_at_1__id_1_status_1_pending"]
    assert claim_index["key"] == [("priority", -1), ("created_at", 1), ("_id", 1), ("status", 1)]
    assert claim_index["partialFilterExpression"] == {"status": "pending"}
    assert index_info["idempotency_key_1"].get("sparse") is True
    assert db["runnerq_tests_results"].index_information()["created_at_1"][
        "expireAfterSeconds"] == 86400

    before = {name: db[name].index_information() for name in names}
    second = run_cli("init-indexes")
    assert second.code == 0, second.stderr
    assert "created:" not in second.stdout and "collection" not in second.stdout
    # everything in place: one line says so (issue 25, point 8), -o json lists each
    assert second.stdout.splitlines() == [f"{db.name}: queue tests: {PLANNED} present"]
    assert {name: db[name].index_information() for name in names} == before


def test_check_fails_before_and_holds_after(run_cli, db) -> None:
    before = run_cli("init-indexes", "--check")
    assert before.code == ExitCode.CHECK_FAILED
    assert before.stderr.splitlines() == ["error: check failed: indexes are missing "
                                          "(run init-indexes)"]
    assert "would create: activities (" in before.stdout
    assert db.list_collection_names() == []  # --check writes nothing

    assert run_cli("init-indexes").code == 0
    after = run_cli("init-indexes", "--check", "-o", "json")
    assert after.code == 0
    assert _json(after)["ok"] is True
    assert {ix["state"] for ix in _json(after)["indexes"]} == {"present"}


def test_dry_run_writes_nothing(run_cli, db) -> None:
    result = run_cli("init-indexes", "--dry-run")
    assert result.code == 0, result.stderr
    assert "collection runnerq_tests_activities: would create" in result.stdout
    assert result.stdout.count("would create: ") == PLANNED
    assert db.list_collection_names() == []
    plan = _json(run_cli("init-indexes", "--dry-run", "-o", "json"))
    assert plan["mode"] == "dry-run"
    assert {ix["state"] for ix in plan["indexes"]} == {"missing"}
    assert db.list_collection_names() == []


def test_conflicting_index_is_reported_and_never_dropped(run_cli, db) -> None:
    db["runnerq_tests_results"].create_index([("created_at", 1)], name="created_at_1",
                                             expireAfterSeconds=60)
    result = run_cli("init-indexes")
    assert result.code == ExitCode.CHECK_FAILED
    line = next(x for x in result.stdout.splitlines() if x.startswith("CONFLICT"))
    assert line.startswith("CONFLICT: results (created_at)")
    assert "expireAfterSeconds: want 86400, have 60" in line and "not dropped" in line
    assert "an index conflicts" in result.stderr
    # everything else was still created, and the conflicting index is untouched
    assert db["runnerq_tests_results"].index_information()["created_at_1"][
        "expireAfterSeconds"] == 60
    assert "priority_-1_created_at_1__id_1_status_1_pending" in \
        db["runnerq_tests_activities"].index_information()
    check = _json(run_cli("init-indexes", "--check", "-o", "json"))
    conflicts = [ix for ix in check["indexes"] if ix["state"] == "conflict"]
    assert len(conflicts) == 1 and conflicts[0]["difference"]


def test_other_queue_and_invalid_queue_name(run_cli, db) -> None:
    assert run_cli("--queue", "emails", "init-indexes").code == 0
    assert "runnerq_emails_activities" in db.list_collection_names()
    bad = run_cli("--queue", "a b", "init-indexes")
    assert bad.code == ExitCode.USAGE
    assert "invalid queue name" in bad.stderr and "Traceback" not in bad.stderr
    assert not [n for n in db.list_collection_names() if "a b" in n]


# Indexes the previous version (0.1) created on the activities collection.
PREVIOUS_VERSION = [
    [("status", 1), ("priority", -1), ("created_at", 1)],
    [("status", 1), ("scheduled_at", 1)],
    [("status", 1), ("lease_deadline", 1)],
    [("status", 1), ("activity_type", 1), ("priority", -1), ("created_at", 1)],
    [("status", 1), ("completed_at", -1)],
    [("status", 1), ("priority", -1), ("created_at", 1), ("_id", 1)],
    [("status", 1), ("scheduled_at", 1), ("_id", 1)],
    [("status", 1), ("completed_at", -1), ("_id", -1)],
]


def test_upgrade_reports_obsolete_indexes_and_drops_them_only_on_request(run_cli, db) -> None:
    activities = db["runnerq_tests_activities"]
    for keys in PREVIOUS_VERSION:
        activities.create_index(keys)
    old_names = {"_".join(f"{k}_{d}" for k, d in keys) for keys in PREVIOUS_VERSION}

    first = _json(run_cli("init-indexes", "-o", "json"))
    assert first["ok"] is True  # obsolete indexes are no failure
    obsolete = [ix for ix in first["indexes"] if ix["state"] == "obsolete"]
    assert {ix["name"] for ix in obsolete} == old_names
    assert old_names <= set(activities.index_information())  # never dropped by itself
    text = run_cli("init-indexes")
    assert text.code == 0 and "drop them with init-indexes --drop-obsolete" in text.stdout
    assert run_cli("init-indexes", "--check").code == 0  # only missing/conflicting fail

    dry = _json(run_cli("init-indexes", "--drop-obsolete", "--dry-run", "-o", "json"))
    assert len([ix for ix in dry["indexes"] if ix["state"] == "obsolete"]) == len(old_names)
    refused = run_cli("init-indexes", "--drop-obsolete")  # no terminal, no --yes
    assert refused.code == ExitCode.USAGE and "refusing without --yes" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert old_names <= set(activities.index_information())

    dropped = _json(run_cli("init-indexes", "--drop-obsolete", "--yes", "-o", "json"))
    assert {ix["name"] for ix in dropped["indexes"] if ix["state"] == "dropped"} == old_names
    assert not old_names & set(activities.index_information())
    again = _json(run_cli("init-indexes", "-o", "json"))
    assert {ix["state"] for ix in again["indexes"]} == {"present"}

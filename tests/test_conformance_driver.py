"""The conformance driver as a program another runner drives (`python -m
runnerq_cli.conformance`): every line in gets one JSON line out, bad requests included,
and nothing else reaches standard output; a stale claim's success writes no result."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

from pymongo import MongoClient

from tests.conformance.driver_process import driver_env


def _run(lines: list[str], tmp_path: Any) -> tuple[list[dict[str, Any]], str]:
    proc = subprocess.run([sys.executable, "-m", "runnerq_cli.conformance"],
                          input="".join(line + "\n" for line in lines), capture_output=True,
                          text=True, timeout=120, env=driver_env(str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(line) for line in proc.stdout.splitlines()]  # JSON lines only
    return replies, proc.stderr


def _open(server: Any, db_name: str, queue: str) -> str:
    return json.dumps({"op": "open", "args": {"uri": server.uri, "queue": queue,
                                              "database": db_name}})


def test_bad_requests_get_one_error_line_each_and_the_driver_reads_on(
        server: Any, db_name: str, tmp_path: Any) -> None:
    claim = {"id": str(uuid.uuid4()), "token": "0" * 32}
    replies, _ = _run([
        json.dumps({"op": "claim", "args": {"types": ["t"]}}),  # before open
        "not json",
        json.dumps(["op", "claim"]),
        json.dumps({"op": "explode"}),
        _open(server, db_name, "cf_bad"),
        json.dumps({"op": "submit", "args": "t"}),
        json.dumps({"op": "submit", "args": {"id": "nope", "type": "t"}}),
        json.dumps({"op": "submit", "args": {"id": str(uuid.uuid4()), "type": "t",
                                             "payload": [1, 2]}}),
        json.dumps({"op": "fail", "args": {"claim": "c"}}),
        json.dumps({"op": "complete", "args": {"claim": claim, "value": 1}}),
        json.dumps({"op": "park", "args": {"claim": claim, "kind": "nap", "step": "s",
                                           "wake_at": "2099-01-01T00:00:00Z"}}),
        json.dumps({"op": "lookup_key", "args": {"key": "order-42"}}),
        json.dumps({"op": "claim", "args": {"types": ["t"]}}),
    ], tmp_path)
    kinds = [r.get("error", {}).get("kind") for r in replies]
    assert kinds == ["invalid_argument", "invalid_argument", "invalid_argument", "unsupported",
                     None, "invalid_argument", "invalid_argument", "invalid_argument",
                     "invalid_argument", "claim_lost", "claim_lost", "invalid_argument",
                     None]
    assert replies[4] == {"ok": {}} and replies[-1] == {"ok": {"claims": []}}
    assert all(r["error"]["message"] for r in replies if "error" in r)


def test_a_stale_claims_success_is_refused_and_writes_no_result(
        server: Any, db_name: str, tmp_path: Any) -> None:
    """The success of a claim the reaper took back answers by the repeat rules alone: a
    success writes its result before its fence, so it must never get that far."""
    aid = str(uuid.uuid4())
    queue = "cf_stale"
    first, _ = _run([_open(server, db_name, queue),
                     json.dumps({"op": "submit", "args": {"id": aid, "type": "t"}}),
                     json.dumps({"op": "claim", "args": {"types": ["t"]}})], tmp_path)
    old = first[2]["ok"]["claims"][0]
    with MongoClient(server.uri, uuidRepresentation="standard") as client:
        db = client[db_name]
        db[f"runnerq_{queue}_activities"].update_one(
            {"_id": uuid.UUID(aid)}, {"$currentDate": {"lease_deadline": True}})
        replies, _ = _run([
            _open(server, db_name, queue),
            json.dumps({"op": "reap", "args": {"limit": 10}}),
            json.dumps({"op": "complete", "args": {"claim": old, "value": "late"}}),
            json.dumps({"op": "renew", "args": {"claim": old}}),
            json.dumps({"op": "fail", "args": {"claim": old, "reason": "late"}}),
        ], tmp_path)
        assert replies[1] == {"ok": {"count": 1}}
        assert replies[2]["error"]["kind"] == "claim_lost"
        assert replies[3] == {"ok": {"renewed": False}}
        assert replies[4]["error"]["kind"] == "claim_lost"
        assert db[f"runnerq_{queue}_results"].count_documents({}) == 0
        doc = db[f"runnerq_{queue}_activities"].find_one({"_id": uuid.UUID(aid)})
        assert doc is not None and doc["status"] == "pending" and doc["retry_count"] == 1

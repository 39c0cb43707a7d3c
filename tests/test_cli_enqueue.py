"""`runnerq-mongo enqueue`: every option lands in the stored document; bulk NDJSON."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runnerq_cli.cli.exits import ExitCode

ENQUEUED = "enqueued "


@pytest.fixture
def docs(queue):
    """The activities collection of the test queue (read straight from MongoDB)."""
    return queue.context.activities


def _id(result) -> uuid.UUID:
    assert result.code == 0, result.stderr
    first = result.stdout.split()
    return uuid.UUID(first[1] if first[0] in ("enqueued", "existing") else first[0])


def test_defaults(run_cli, docs) -> None:
    result = run_cli("enqueue", "send_email", "--payload", '{"to": "a@example.com"}')
    assert result.stdout.startswith(ENQUEUED) and result.stdout.rstrip().endswith("(pending)")
    doc = docs.find_one({"_id": _id(result)})
    assert doc["activity_type"] == "send_email"
    assert doc["payload"] == {"to": "a@example.com"}
    assert (doc["priority"], doc["status"], doc["retry_count"]) == (2, "pending", 0)
    assert (doc["max_retries"], doc["timeout_seconds"], doc["retry_delay_seconds"]) == (3, 300, 1)
    assert doc["metadata"] == {} and "scheduled_at" not in doc and "idempotency_key" not in doc


def test_every_option_lands_in_the_document(run_cli, docs) -> None:
    before = datetime.now(UTC)
    result = run_cli("enqueue", "resize", "-p", '{"n": 1}', "--priority", "high", "--delay",
                     "5m", "--max-retries", "7", "--timeout", "2m", "--retry-delay", "10s",
                     "--metadata", "team=media", "-m", "origin=cli")
    doc = docs.find_one({"_id": _id(result)})
    assert doc["priority"] == 3
    assert doc["status"] == "scheduled"
    assert before + timedelta(seconds=299) <= doc["scheduled_at"] <= datetime.now(UTC) + \
        timedelta(seconds=301)
    assert (doc["max_retries"], doc["timeout_seconds"], doc["retry_delay_seconds"]) == (7, 120, 10)
    assert doc["metadata"] == {"team": "media", "origin": "cli"}


@pytest.mark.parametrize(("given", "stored"), [("low", 1), ("NORMAL", 2), ("critical", 4),
                                               ("4", 4), ("1", 1)])
def test_priority_names_and_numbers(run_cli, docs, given: str, stored: int) -> None:
    doc = docs.find_one({"_id": _id(run_cli("enqueue", "t", "-p", "{}", "--priority", given))})
    assert doc["priority"] == stored


def test_at_future_is_scheduled_and_past_is_pending(run_cli, docs) -> None:
    at = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    doc = docs.find_one({"_id": _id(run_cli("enqueue", "t", "-p", "{}", "--at",
                                            at.isoformat().replace("+00:00", "Z")))})
    assert doc["status"] == "scheduled" and doc["scheduled_at"] == at
    naive = (at + timedelta(hours=1)).replace(tzinfo=None).isoformat()  # no zone: UTC
    doc = docs.find_one({"_id": _id(run_cli("enqueue", "t", "-p", "{}", "--at", naive))})
    assert doc["scheduled_at"] == at + timedelta(hours=1)
    doc = docs.find_one({"_id": _id(run_cli("enqueue", "t", "-p", "{}", "--at",
                                            "2020-01-01T00:00:00+01:00"))})
    assert doc["status"] == "pending" and "scheduled_at" not in doc


def test_quiet_prints_only_the_id(run_cli, docs) -> None:
    result = run_cli("enqueue", "t", "-p", "{}", "-q")
    assert result.code == 0 and result.stderr == ""
    assert len(result.stdout.splitlines()) == 1
    assert docs.find_one({"_id": uuid.UUID(result.stdout.strip())}) is not None


def test_json_output_is_the_whole_activity(run_cli, docs) -> None:
    result = run_cli("enqueue", "t", "-p", '{"x": [1, 2]}', "-m", "k=v", "-o", "json")
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["created"] is True
    assert data["activity_type"] == "t" and data["payload"] == {"x": [1, 2]}
    assert data["metadata"] == {"k": "v"} and data["status"] == "pending"
    assert docs.find_one({"_id": uuid.UUID(data["id"])})["payload"] == {"x": [1, 2]}


def test_payload_from_file_and_at_dash_never_implicitly_from_stdin(run_cli, docs,
                                                                    tmp_path: Path) -> None:
    # Piped input without `-p @-` is not read: the payload is {} (issue 11).
    stdin_id = _id(run_cli("enqueue", "t", input='{"source": "stdin"}\n'))
    assert docs.find_one({"_id": stdin_id})["payload"] == {}
    payload_file = tmp_path / "payload.json"
    payload_file.write_text('{"source": "file", "nested": {"a": true}}')
    file_id = _id(run_cli("enqueue", "t", "--payload", f"@{payload_file}"))
    assert docs.find_one({"_id": file_id})["payload"] == {"source": "file",
                                                         "nested": {"a": True}}
    dash_id = _id(run_cli("enqueue", "t", "-p", "@-", input='{"source": "dash"}'))
    assert docs.find_one({"_id": dash_id})["payload"] == {"source": "dash"}
    empty = run_cli("enqueue", "t", "-p", "@-", input="  \n")
    assert empty.code == ExitCode.USAGE  # `-p @-` with nothing piped in is no JSON object
    assert empty.stderr.startswith("error: payload from stdin: ")


def test_enqueue_in_a_while_read_loop_keeps_the_loops_input(cli_env, docs) -> None:
    """`while read t; do runnerq-mongo enqueue "$t"; done` enqueues every line."""
    import subprocess
    import sys

    script = ('printf "a\\nb\\nc\\n" | while read -r t; do '
              f'"{sys.executable}" -m runnerq_cli enqueue "$t" -q || exit 9; done')
    proc = subprocess.run(["bash", "-c", script], env=cli_env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(d["activity_type"] for d in docs.find()) == ["a", "b", "c"]


def test_idempotency_return_existing_is_the_default(run_cli, docs) -> None:
    first = _id(run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "order-1"))
    again = run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "order-1", "-o", "json")
    data = json.loads(again.stdout)
    assert again.code == 0 and data["created"] is False and data["id"] == str(first)
    text = run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "order-1")
    assert text.stdout.startswith(f"existing {first}")
    assert run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "order-1",
                   "-q").stdout.strip() == str(first)
    assert docs.count_documents({}) == 1
    assert docs.find_one({"_id": first})["idempotency_key"] == "order-1"
    # keys are per activity type
    other = _id(run_cli("enqueue", "other", "-p", "{}", "--idempotency-key", "order-1"))
    assert other != first and docs.count_documents({}) == 2


def test_idempotency_allow_reuse_and_no_reuse(run_cli, docs) -> None:
    first = _id(run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "k"))
    reused = _id(run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "k",
                         "--on-duplicate", "allow-reuse"))
    assert reused != first and docs.count_documents({}) == 2
    refused = run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "k",
                      "--on-duplicate", "no-reuse")
    assert refused.code == ExitCode.CONFLICT and refused.stdout == ""
    assert refused.stderr.startswith("error: duplicate activity") and str(reused) in refused.stderr
    assert docs.count_documents({}) == 2


def test_idempotency_allow_reuse_on_failure(run_cli, docs, queue) -> None:
    first = _id(run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "k"))
    conflict = run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "k",
                       "--on-duplicate", "allow-reuse-on-failure")
    assert conflict.code == ExitCode.CONFLICT
    assert "idempotency conflict" in conflict.stderr and "pending" in conflict.stderr
    [claim] = queue.dequeue("w1", types=["t"])  # it fails, for real
    queue.ack_failure(claim, "declined", retryable=False)
    retried = _id(run_cli("enqueue", "t", "-p", "{}", "--idempotency-key", "k",
                          "--on-duplicate", "allow-reuse-on-failure"))
    assert retried != first and docs.count_documents({}) == 2


# ------------------------------------------------------------------ bulk

GOOD_AND_BAD = "\n".join([
    '{"type": "a", "payload": {"n": 1}}',
    '{"type": "a", "payload": [1]}',
    "",
    "{not json",
    '{"activity_type": "b", "priority": "high", "delay": "1m", "metadata": {"k": "v"},'
    ' "max_retries": 9, "timeout": 60, "retry_delay": "5s", "idempotency_key": "z"}',
    '{"type": "b", "idempotency_key": "z", "on_duplicate": "no-reuse"}',
    '{"type": "c", "colour": "red"}',
    '{"type": "b", "idempotency_key": "z"}',
    '{"type": "d", "priority": "urgent"}',
    '{"type": "e", "delay": "-5s"}',
    '{"payload": {}}',
]) + "\n"


def test_bulk_bad_lines_do_not_stop_the_others(run_cli, docs, tmp_path: Path) -> None:
    source = tmp_path / "in.ndjson"
    source.write_text(GOOD_AND_BAD)
    result = run_cli("enqueue", "--from", str(source))
    assert result.code == ExitCode.USAGE
    lines = result.stdout.splitlines()
    assert lines[0] == ("enqueued 2 of 10 lines; 1 existing returned (idempotency key held); "
                        "1 rejected as duplicates; 6 invalid")
    rejected = {int(line.split(":")[0].split()[1]): line for line in lines[1:]}
    assert sorted(rejected) == [2, 4, 6, 7, 9, 10, 11]
    assert "payload must be a JSON object" in rejected[2]
    assert "malformed JSON" in rejected[4]
    assert "duplicate:" in rejected[6]
    assert "unknown field 'colour'" in rejected[7]
    assert "unknown priority 'urgent'" in rejected[9]
    assert "must not be negative" in rejected[10]
    assert "missing activity type" in rejected[11]
    assert result.stderr.splitlines() == ["error: 7 of 10 lines rejected"]

    assert docs.count_documents({}) == 2
    keyed = docs.find_one({"activity_type": "b"})
    assert (keyed["priority"], keyed["status"], keyed["metadata"]) == (3, "scheduled",
                                                                       {"k": "v"})
    assert (keyed["max_retries"], keyed["timeout_seconds"], keyed["retry_delay_seconds"],
            keyed["idempotency_key"]) == (9, 60, 5, "z")
    assert docs.find_one({"activity_type": "a"})["payload"] == {"n": 1}


def test_bulk_json_summary(run_cli, docs, tmp_path: Path) -> None:
    source = tmp_path / "in.ndjson"
    source.write_text(GOOD_AND_BAD)
    summary = json.loads(run_cli("enqueue", "--from", str(source), "-o", "json").stdout)
    assert (summary["lines"], summary["enqueued"], summary["existing"],
            summary["duplicates_rejected"], summary["invalid"]) == (10, 2, 1, 1, 6)
    assert summary["written"] is True and summary["aborted"] is None
    assert [r["line"] for r in summary["rejected"]] == [2, 4, 6, 7, 9, 10, 11]
    assert {a["line"] for a in summary["activities"]} == {1, 5, 8}
    ids = {uuid.UUID(a["id"]) for a in summary["activities"] if a["created"]}
    assert {d["_id"] for d in docs.find()} == ids


def test_bulk_strict_writes_nothing(run_cli, docs, tmp_path: Path) -> None:
    source = tmp_path / "in.ndjson"
    source.write_text(GOOD_AND_BAD)
    result = run_cli("enqueue", "--from", str(source), "--strict")
    assert result.code == ExitCode.USAGE
    assert result.stdout.splitlines()[0].endswith("nothing written (--strict)")
    assert "line 4: invalid: malformed JSON" in result.stdout
    assert result.stderr.splitlines() == [
        "error: 6 of 10 lines rejected; nothing written (--strict)"]
    assert docs.count_documents({}) == 0


def test_bulk_from_stdin_all_good_with_flag_defaults(run_cli, docs) -> None:
    lines = "".join(json.dumps({"type": "t", "payload": {"i": i}}) + "\n" for i in range(5))
    lines += json.dumps({"type": "t", "payload": {"i": 5}, "priority": "low"}) + "\n"
    result = run_cli("enqueue", "--from", "-", "--priority", "critical", "-m", "batch=7",
                     "--batch-size", "2", input=lines)
    assert result.code == 0, result.stderr
    assert result.stdout.strip() == "enqueued 6 of 6 lines"
    assert result.stderr == ""
    stored = {d["payload"]["i"]: d for d in docs.find()}
    assert sorted(stored) == list(range(6))
    assert {stored[i]["priority"] for i in range(5)} == {4}
    assert stored[5]["priority"] == 1  # a line's own field wins over the flag
    assert all(d["metadata"] == {"batch": "7"} for d in stored.values())


def test_bulk_quiet_prints_ids(run_cli, docs) -> None:
    result = run_cli("enqueue", "--from", "-", "-q", input='{"type": "t"}\n{"type": "u"}\n')
    assert result.code == 0
    assert {uuid.UUID(x) for x in result.stdout.split()} == {d["_id"] for d in docs.find()}


def test_bulk_quiet_still_names_the_rejected_lines_on_stderr(run_cli, docs) -> None:
    lines = '{"type": "t"}\n{"type": "t", "payload": ["oops"]}\nnot json\n'
    result = run_cli("enqueue", "--from", "-", "-q", input=lines)
    assert result.code == ExitCode.USAGE
    assert [uuid.UUID(x) for x in result.stdout.split()] == [d["_id"] for d in docs.find()]
    err = result.stderr.splitlines()
    assert err[0].startswith("line 2: invalid: ") and "payload" in err[0]
    assert err[1].startswith("line 3: invalid: ")
    assert err[-1] == "error: 2 of 3 lines rejected"


@pytest.mark.parametrize("args", [
    ("t", "--from", "-"),
    ("--from", "-", "--payload", "{}"),
    ("--from", "-", "--idempotency-key", "k"),
    ("t", "-p", "{}", "--strict"),
    (),
])
def test_bulk_flag_misuse(run_cli, docs, args: tuple[str, ...]) -> None:
    result = run_cli("enqueue", *args, input='{"type": "t"}\n')
    assert result.code == ExitCode.USAGE
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert docs.count_documents({}) == 0


def test_console_script_end_to_end(run_cli_subprocess, docs) -> None:
    result = run_cli_subprocess("enqueue", "t", "--priority", "high", "-q", "-p", "@-",
                                input='{"via": "pipe"}')
    assert result.code == 0, result.stderr
    doc = docs.find_one({"_id": uuid.UUID(result.stdout.strip())})
    assert doc["payload"] == {"via": "pipe"} and doc["priority"] == 3

"""The newest commands (`tree`, `signal`, `limit`) given what a hostile or careless user,
CI script or other program gives them, run as a user runs them: every refusal one
`error:` line with its documented exit code and nothing written; stored text shown as
text; `-o json` in the documented shapes.

Each test guards a fault found by trying: `tree` and `limit show` printed a worker id or
a signal name raw (an OSC sequence retitled the terminal); a limits or schedules file
read `010` as 8 and `1:30` as 90 (YAML 1.1); `limit list` and `limit show` said nothing
was full or held back while `stats` did, and gave `updated_at` with `+00:00`; a bad value
in a limits file did not say which entry; `limit set` named `key_limit` for `--key-limit`;
a signal's unstorable payload was called a "result".
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.checkpoints import checkpoint_id
from runnerq_cli.backend.domain.flow import make_limits
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.cli.exits import ExitCode

FAR = datetime(2099, 1, 1, tzinfo=UTC)
# What a terminal acts on (C0 but the line feeds that end lines, DEL, C1, bidi).
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = "t\x1b]0;pwned\x07\x1b[2J[bold]x[/bold]"
ESCAPED = "t\\x1b]0;pwned\\x07\\x1b[2J[bold]x[/bold]"


def written(rq: RunnerQ) -> str:
    """Every document of the queue's database, hashed: a refused command leaves it."""
    database = rq.context.activities.database
    digest = hashlib.sha256()
    for name in sorted(database.list_collection_names()):
        for doc in database[name].find({}).sort("_id", 1):
            digest.update(f"{name}:{sorted(doc.items(), key=lambda kv: kv[0])!r}".encode())
    return digest.hexdigest()


def claim(rq: RunnerQ, activity_type: str, worker: str = "w1"):
    rq.process_scheduled()
    [found] = rq.dequeue(worker, types=[activity_type], limit=1)
    return found


def refused(out, code: ExitCode, *words: str) -> None:
    """One `error:` line with `code`, nothing on standard output."""
    assert out.code == code, (out.code, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


# ------------------------------------------------------------------ text shown as text


def test_tree_shows_waits_and_workers_of_other_programs_as_text(backend: RunnerQ,
                                                                run_cli) -> None:
    """A signal name and a child's worker reach `tree` through the wait's words."""
    parked = backend.enqueue("order", {}).activity_id
    held = claim(backend, "order")
    backend.durable.park(held, "signal", HOSTILE, FAR,
                         checkpoint_id(parked, "signal", HOSTILE))
    root = backend.enqueue("saga", {}).activity_id
    held = claim(backend, "saga")
    child = backend.durable.spawn(held, ActivitySpec("parcel", {})).activity_id
    backend.durable.park(held, "await", "parcel", FAR, child, child)
    claim(backend, "parcel", worker="w1")
    backend.context.activities.update_one({"_id": child}, {"$set": {"worker_id": HOSTILE}})
    for aid, shown in ((parked, f"waiting for signal {ESCAPED}"),
                       (root, f"the child is running on worker {ESCAPED}")):
        out = run_cli("tree", str(aid))
        assert out.code == 0, out.stderr
        assert not RAW.search(out.stdout), out.stdout
        assert shown in out.stdout


def test_limit_show_prints_its_holders_as_text(backend: RunnerQ, run_cli) -> None:
    backend.limits.set(make_limits("held", concurrency=1))
    backend.enqueue(ActivitySpec("held", {}, key="k1"))
    claim(backend, "held")
    backend.context.limits.update_one({"_id": "held"}, {"$set": {
        "holders.0.w": HOSTILE, "holders.0.k": HOSTILE}})
    out = run_cli("limit", "show", "held")
    assert out.code == 0, out.stderr
    assert not RAW.search(out.stdout), out.stdout
    assert f"  {ESCAPED}  key {ESCAPED}" in out.stdout


# ------------------------------------------------------------------ JSON of limits


def test_limit_list_and_show_say_what_is_full_and_held_back_as_stats(backend: RunnerQ,
                                                                     run_cli) -> None:
    backend.limits.set(make_limits("held", concurrency=1))
    for _ in range(3):
        backend.enqueue("held", {})
    claim(backend, "held")
    shown = json.loads(run_cli("limit", "show", "held", "-o", "json").stdout)
    [listed] = json.loads(run_cli("limit", "list", "-o", "json").stdout)
    [in_stats] = json.loads(run_cli("stats", "-o", "json").stdout)["limits"]
    for data in (shown, listed, in_stats):
        assert data["held_back"] == 2 and data["in_use"] == 1, data
        assert data["full"].startswith("held: 1 of 1 running"), data
        # ISO-8601 UTC with Z, as every time of our JSON (docs/reference.md)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", data["updated_at"])
    assert {k: v for k, v in listed.items() if k != "holders"} == in_stats


# ------------------------------------------------------------------ refusals


def test_limit_set_refusals_name_the_flag_typed(backend: RunnerQ, run_cli) -> None:
    before = written(backend)
    cases = [
        (["--key-limit", "0"], "--key-limit: expected a whole number of at least 1"),
        (["--concurrency", "1e309"], "--concurrency: expected a whole number"),
        (["--concurrency", "NaN"], "--concurrency: expected a whole number"),
        (["--concurrency", "2.5"], "--concurrency: expected a whole number"),
        (["--concurrency", "-1"], "--concurrency: expected a whole number of at least 1"),
        (["--concurrency", "99999999999999999999999"], "does not fit in 64 bits"),
        (["--key-rate", "5/0s"], "--key-rate: the period must be 1s to 1d"),
        (["--rate", "1e309/1m"], "--rate: expected COUNT/PERIOD"),
        ([], "(--concurrency, --key-limit, --rate or --key-rate)"),
    ]
    for flags, words in cases:
        refused(run_cli("limit", "set", "charge", *flags), ExitCode.USAGE, words)
    assert written(backend) == before


def _limits_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("text", "words"), [
    ("- type: a\n  concurrency: 1\n- type: b\n  concurrency: -5\n",
     "limit 2 (b): concurrency: expected a whole number of at least 1, got -5"),
    ("- type: a\n  concurrency: 1\n- type: a\n  rate: 5/s\n",
     "limit 2 (a): activity type 'a' is limited twice (also limit 1)"),
    ("- type: a\n  concurrency: 1\n- type: [x]\n  concurrency: 1\n",
     "limit 2: activity type: expected text"),
    ('[{"type": "a", "concurrency": 1}, {"type": "c", "key_limit": NaN}]',
     "limit 2 (c): key_limit"),
    # YAML 1.1 numbers are text here, refused as on the command line
    ("- type: a\n  concurrency: 0x10\n", "limit 1 (a): concurrency: expected a whole number, "
                                         "got '0x10'"),
    ("- type: a\n  concurrency: 1_000\n", "got '1_000'"),
    ("- type: a\n  concurrency: 1:30\n", "got '1:30'"),
    ("- type: a\n  concurrency: !!int 0x10\n", "malformed YAML"),
])
def test_limit_files_name_the_entry_refused(backend: RunnerQ, run_cli, tmp_path: Path,
                                            text: str, words: str) -> None:
    before = written(backend)
    path = _limits_file(tmp_path, text)
    refused(run_cli("limit", "apply", path), ExitCode.USAGE, path, words)
    assert written(backend) == before


def test_yaml_numbers_with_leading_zeros_are_decimal(backend: RunnerQ, run_cli,
                                                     tmp_path: Path) -> None:
    """`010` is ten, as a reader reads it and as `--concurrency 010` is (YAML 1.1: 8)."""
    out = run_cli("limit", "apply", _limits_file(tmp_path, "- type: a\n  concurrency: 010\n"))
    assert out.code == 0, out.stderr
    assert backend.limits.get("a").limits.concurrency == 10


def test_schedule_and_config_files_read_numbers_the_same_way(backend: RunnerQ, run_cli,
                                                             tmp_path: Path) -> None:
    """One YAML reader (inputs.load_yaml): `every: 1:30` is not 90 seconds."""
    before = written(backend)
    schedules = tmp_path / "schedules.yaml"
    schedules.write_text("- name: beat\n  type: ping\n  every: 1:30\n")
    refused(run_cli("schedule", "apply", str(schedules)), ExitCode.USAGE, "schedule 1 (beat)",
            "'1:30'")
    assert written(backend) == before
    config = tmp_path / "runnerq.yaml"
    config.write_text("worker:\n  concurrency: 0x10\n")
    refused(run_cli("--config", str(config), "config", "show"), ExitCode.CONFIG,
            "'worker.concurrency'", "'0x10'")


def _parked(rq: RunnerQ) -> uuid.UUID:
    aid = rq.enqueue("order", {}).activity_id
    held = claim(rq, "order")
    rq.durable.park(held, "signal", "approve", FAR, checkpoint_id(aid, "signal", "approve"))
    return aid


def test_signal_payloads_that_cannot_be_stored_are_named_as_payloads(backend: RunnerQ,
                                                                     run_cli) -> None:
    aid = str(_parked(backend))
    before = written(backend)
    for payload in ("99999999999999999999999", '{"a\\u0000": 1}', '"\\ud800"'):
        refused(run_cli("signal", aid, "approve", "--payload", payload), ExitCode.USAGE,
                "the signal's payload cannot be stored in MongoDB")
    for payload in ("NaN", "1e309", "[1,"):
        refused(run_cli("signal", aid, "approve", "--payload", payload), ExitCode.USAGE,
                "--payload: malformed JSON")
    assert written(backend) == before


def test_the_console_preview_of_a_signal_names_the_payload(backend: RunnerQ) -> None:
    from runnerq_cli.errors import InvalidArgument

    aid = _parked(backend)
    with pytest.raises(InvalidArgument, match=r"^the signal's payload cannot be stored"):
        backend.signals.check(aid, "approve", {"n": 2**70})
    with pytest.raises(InvalidArgument, match=r"^the signal's payload is not JSON"):
        backend.signals.check(aid, "approve", float("nan"))


def test_stats_prints_limited_types_as_text(backend: RunnerQ, run_cli) -> None:
    backend.limits.set(make_limits(HOSTILE, concurrency=1))
    out = run_cli("stats")
    assert out.code == 0, out.stderr
    assert not RAW.search(out.stdout), out.stdout
    assert f"{ESCAPED} 0/1 in use" in out.stdout


def test_limit_documents_of_other_programs_never_fail_a_view(backend: RunnerQ,
                                                             run_cli) -> None:
    """`holders` and `starts` that are not lists (another program's document) read as
    empty: the views go on, as they do for a limit value no claimer can honour."""
    backend.limits.set(make_limits("odd", concurrency=2))
    backend.context.limits.update_one({"_id": "odd"}, {"$set": {
        "holders": "x", "starts": 5, "updated_at": "yesterday"}})
    backend.context.limits.insert_one({"_id": "other", "concurrency": 2, "holders": [
        {"w": datetime(2020, 1, 1, tzinfo=UTC), "k": 5, "l": "z"}, 7], "starts": None})
    for args in (["limit", "list"], ["limit", "show", "odd"], ["stats"], ["queues"]):
        out = run_cli(*args)
        assert out.code == 0, (args, out.stderr)
    listed = json.loads(run_cli("limit", "list", "-o", "json").stdout)
    assert [(r["activity_type"], r["in_use"], r["updated_at"]) for r in listed] == [
        ("odd", 0, None), ("other", 1, None)]
    assert listed[1]["holders"] == [{"worker_id": "2020-01-01T00:00:00Z", "key": 5}]
    backend.enqueue("odd", {})
    assert [c.activity.activity_type for c in backend.dequeue("w1", types=["odd"])] == ["odd"]


def test_limit_writes_refuse_a_misspelt_queue(backend: RunnerQ, run_cli,
                                              tmp_path: Path) -> None:
    """As every operator write: a typo in --queue is named, not limited unseen."""
    database = backend.context.activities.database
    before = (written(backend), sorted(database.list_collection_names()))
    path = _limits_file(tmp_path, "- type: a\n  concurrency: 1\n")
    for args in (["limit", "set", "a", "--concurrency", "1"], ["limit", "apply", path],
                 ["limit", "apply", path, "--dry-run"], ["limit", "remove", "a"]):
        refused(run_cli("--queue", "tset", *args), ExitCode.NOT_FOUND,
                "queue 'tset' does not exist", "tests")
    assert (written(backend), sorted(database.list_collection_names())) == before
    out = run_cli("--queue", "fresh", "limit", "set", "a", "--concurrency", "1", "--create")
    assert out.code == 0, out.stderr
    assert database["runnerq_fresh_limits"].count_documents({}) == 1

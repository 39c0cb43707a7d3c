"""`runnerq-mongo schedule ...` and `scheduler` as a user runs them (in process): output,
exit codes, bad input as a class (one line, its exit code, nothing written), `apply`'s
file, idempotence."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from bson import Binary
from pymongo import MongoClient


@pytest.fixture
def schedules(server, db_name):
    client = MongoClient(server.uri, uuidRepresentation="standard", tz_aware=True)
    yield client[db_name]["runnerq_tests_schedules"]
    client.close()


def test_add_list_show_trigger_pause_resume_remove(run_cli, schedules):
    r = run_cli("schedule", "add", "nightly", "--type", "charge", "--cron", "30 2 * * *",
                "--timezone", "Europe/Berlin", "-p", '{"plan": "pro"}', "-m", "team=billing")
    assert r.code == 0, r.stderr
    assert r.stdout.startswith("added schedule nightly: At 02:30 every day (Europe/Berlin)")
    r = run_cli("schedule", "list", "-o", "json")
    [row] = json.loads(r.stdout)
    assert (row["name"], row["cron"], row["timezone"], row["paused"]) == (
        "nightly", "30 2 * * *", "Europe/Berlin", False)
    assert row["activity"]["payload"] == {"plan": "pro"}
    r = run_cli("schedule", "show", "nightly", "--next", "3")
    assert r.code == 0, r.stderr
    assert "At 02:30 every day (Europe/Berlin)" in r.stdout
    assert r.stdout.count("CET") + r.stdout.count("CEST") == 3  # each in its zone and UTC
    r = run_cli("schedule", "trigger", "nightly", "-o", "json")
    assert r.code == 0 and json.loads(r.stdout)["status"] == "pending"
    r = run_cli("list", "pending", "-o", "json")
    assert r.code == 0, r.stderr
    assert run_cli("schedule", "pause", "nightly", "--reason", "freeze").stdout == \
        "paused schedule nightly\n"
    assert "already paused" in run_cli("schedule", "pause", "nightly").stdout
    assert "paused (freeze)" in run_cli("schedule", "list").stdout
    assert run_cli("schedule", "resume", "nightly").code == 0
    assert run_cli("schedule", "remove", "nightly").code == 0
    assert run_cli("schedule", "remove", "nightly").code == 4
    assert run_cli("schedule", "show", "nightly").code == 4
    assert schedules.count_documents({}) == 0


BAD_ADD = [
    (["--cron", "61 * * * *"], 2, "invalid cron expression"),
    (["--cron", "0 0 30 2 *"], 2, "never matches"),
    (["--cron", "@daily", "--timezone", "Mars/Olympus"], 2, "unknown time zone"),
    (["--every", "0s"], 2, "more than 0"),
    (["--every", "10m", "--start", "2030-01-02T00:00:00Z", "--end", "2030-01-01T00:00:00Z"],
     2, "not before end"),
    (["--every", "10m", "--end", "2001-01-01T00:00:00Z"], 2, "never fires"),
    (["--cron", "@daily", "--every", "1m"], 2, "one of them"),
    ([], 2, "cron expression or an interval"),
    (["--every", "1m", "--missed", "sometimes"], 2, "missed-fire policy"),
    (["--every", "1m", "--payload", "[1]"], 2, "payload"),
]


@pytest.mark.parametrize("options, code, message", BAD_ADD)
def test_bad_add_is_one_line_its_code_and_nothing_written(run_cli, schedules, options, code,
                                                          message):
    r = run_cli("schedule", "add", "x", "--type", "t", *options)
    assert r.code == code
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error:") and message in r.stderr
    assert "Traceback" not in r.stderr
    assert schedules.count_documents({}) == 0


def test_name_taken_is_exit_5_and_nothing_changed(run_cli, schedules):
    assert run_cli("schedule", "add", "x", "--type", "t", "--every", "1m").code == 0
    r = run_cli("schedule", "add", "x", "--type", "t", "--every", "5m")
    assert r.code == 5 and "already exists" in r.stderr
    assert schedules.find_one({"_id": "x"})["every_seconds"] == 60


GOOD_FILE = """\
schedules:
  - name: nightly-charge
    type: charge
    cron: "30 2 * * *"
    timezone: Europe/Berlin
    payload: {plan: pro}
    missed: latest
  - name: heartbeat
    type: ping
    every: 10m
    overlap: skip
"""

BAD_FILES = [
    (b"schedules: [name: x\n", "malformed YAML at line"),
    (b"- name: caf\xe9\n", "not UTF-8"),
    (b"- name: a\n  type: t\n  cron: '0 0 30 2 *'\n", "schedule 1 (a): invalid cron"),
    (b"- name: a\n  type: t\n  every: 0s\n", "more than 0"),
    (b"- name: a\n  type: t\n  cron: '@daily'\n  timezone: Nowhere\n", "unknown time zone"),
    (b"- name: a\n  type: t\n  every: 1m\n- name: a\n  type: t\n  every: 2m\n",
     "defined twice"),
    (b"- name: a\n  type: t\n  every: 1m\n  colour: red\n", "unknown field"),
    (b"just text\n", "expected a list of schedules"),
    (b"- name: a\n  type: t\n  every: 1m\n  start: 2030-01-02T00:00:00Z\n"
     b"  end: 2030-01-01T00:00:00Z\n", "not before end"),
    (b"- name: a\n  type: t\n  every: 1m\n  start: 2030-01-02\n", "a date alone"),
    (b"- name: a\n  type: t\n  every: 1m\n  payload: [1]\n", "payload must be a mapping"),
    (b"- name: a\n  type: t\n  every: 1m\n  priority: 9\n", "priority"),
    (b"- {name: a, type: t, every: 1m, max_catchup: 0}\n", "max_catchup"),
    # YAML as a class, read as the config file is (one loader): an alias bomb expanded
    # for ever, a key twice kept the last silently, deep nesting and a 5000-digit
    # integer were internal errors (exit 1)
    (b"- name: a\n  type: t\n  every: 1m\n  payload:\n    a: &a [x, x, x, x, x, x, x]\n"
     + b"".join(b"    %c: &%c [%s]\n" % (c, c, b", ".join([b"*" + bytes([c - 1])] * 9))
                for c in b"bcdefghij"), "aliases (*name) are not allowed"),
    (b"- name: a\n  type: t\n  every: 1m\n  every: 1h\n", "duplicate key 'every'"),
    (b"- name: a\n  type: t\n  every: 1m\n  payload: " + b"[" * 20000 + b"]" * 20000
     + b"\n", "nested too deeply"),
    (b"- {name: a, type: t, every: 1m, payload: {n: " + b"9" * 5000 + b"}}\n",
     "malformed YAML"),
    (b"- {name: a, type: t, every: 1m}\n---\n- {name: b, type: t, every: 1m}\n",
     "malformed YAML"),
    # a payload is a JSON object: YAML's other values are refused, never stored
    (b"- {name: a, type: t, every: 1m, payload: {n: .nan}}\n", "finite"),
    (b"- {name: a, type: t, every: 1m, payload: {n: [1, {m: -.inf}]}}\n", "finite"),
    (b"- {name: a, type: t, every: 1m, payload: {b: !!binary aGVsbG8=}}\n", "not JSON"),
    (b"- {name: a, type: t, every: 1m, payload: {at: 2030-01-01T00:00:00Z}}\n", "not JSON"),
    (b"- {name: a, type: t, every: 1m, payload: {s: !!set {x}}}\n", "not JSON"),
    (b"- {name: a, type: t, every: 1m, payload: {1: one}}\n", "key must be text"),
    # accepted once and ignored: the schedule fired all the same
    (b"- {name: a, type: t, every: 1m, paused: true}\n", "schedule pause NAME"),
]


@pytest.mark.parametrize("content, message", BAD_FILES)
def test_bad_apply_file_is_one_line_exit_2_and_nothing_written(run_cli, schedules, tmp_path,
                                                               content, message):
    path = tmp_path / "schedules.yaml"
    path.write_bytes(GOOD_FILE.encode())
    assert run_cli("schedule", "apply", str(path)).code == 0
    before = list(schedules.find({}).sort("_id"))
    path.write_bytes(content)
    r = run_cli("schedule", "apply", str(path), "--prune")
    assert r.code == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr
    assert list(schedules.find({}).sort("_id")) == before


def test_apply_shows_the_file_name_as_text(run_cli, tmp_path):
    """The name comes from the command line: an ESC in it is shown, never sent."""
    path = tmp_path / "sched\x1b[2Jules.yaml"
    path.write_text(GOOD_FILE)
    assert run_cli("schedule", "apply", str(path)).code == 0
    r = run_cli("schedule", "apply", str(path))
    assert "\x1b" not in r.stdout and "sched\\x1b[2Jules.yaml" in r.stdout, r.stdout


def test_apply_twice_says_nothing_changed_prune_and_dry_run(run_cli, schedules, tmp_path):
    path = tmp_path / "schedules.yaml"
    path.write_text(GOOD_FILE)
    r = run_cli("schedule", "apply", str(path))
    assert r.code == 0 and r.stdout.splitlines()[-1] == "2 created"
    r = run_cli("schedule", "apply", str(path))
    assert r.stdout == f"nothing changed: 2 schedules as in {path}\n"
    assert json.loads(run_cli("schedule", "apply", str(path), "-o", "json").stdout)[
        "changed"] is False
    path.write_text(GOOD_FILE.split("  - name: heartbeat")[0].replace("latest", "all"))
    r = run_cli("schedule", "apply", str(path), "--prune", "--dry-run")
    assert r.stdout.splitlines() == ["would update nightly-charge (missed)",
                                     "would remove heartbeat",
                                     "dry run, nothing written: 1 updated, 1 removed"]
    assert schedules.count_documents({}) == 2
    r = run_cli("schedule", "apply", str(path), "--prune")
    assert r.code == 0 and [d["_id"] for d in schedules.find({})] == ["nightly-charge"]
    r = run_cli("audit", "-o", "jsonl")
    actions = [json.loads(line)["action"] for line in r.stdout.splitlines()]
    assert actions == ["schedule apply"] * 2


@pytest.mark.parametrize("empty", ["", "[]\n", "schedules: []\n", "# rendered nothing\n"])
def test_prune_with_a_file_of_no_schedules_is_refused(run_cli, schedules, tmp_path, empty):
    """An empty file (a template that rendered nothing, a truncated file) with --prune
    would remove every schedule: refused, exit 2, nothing written; --dry-run still
    shows that plan, and without --prune the empty file changes nothing."""
    path = tmp_path / "schedules.yaml"
    path.write_text(GOOD_FILE)
    assert run_cli("schedule", "apply", str(path)).code == 0
    path.write_text(empty)
    r = run_cli("schedule", "apply", str(path), "--prune")
    assert r.code == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "would remove all 2" in r.stderr, r.stderr
    assert schedules.count_documents({}) == 2
    r = run_cli("schedule", "apply", str(path), "--prune", "--dry-run")
    assert r.code == 0 and "would remove heartbeat" in r.stdout
    assert run_cli("schedule", "apply", str(path)).code == 0
    assert schedules.count_documents({}) == 2


def test_scheduler_once_fires_what_is_due(run_cli, schedules):
    assert run_cli("schedule", "add", "t", "--type", "t", "--every", "1m").code == 0
    schedules.update_one({"_id": "t"}, {"$set": {"next_fire_at": schedules.find_one(
        {"_id": "t"})["created_at"]}})
    r = run_cli("scheduler", "--once", "-o", "jsonl")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["fired"] == 1
    assert run_cli("scheduler", "--once").stdout == ""  # nothing due: nothing said
    assert run_cli("scheduler", "--once").stderr == ""


def test_scheduler_says_it_runs_on_stderr(cli_env, backend):
    """Left running, it prints only when a round fires: its first line (stderr, so stdout
    stays the rounds) says which queue, how often, and how to stop it."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "scheduler",
                             "--interval", "0.5s"], env=cli_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert first == (f"scheduler for queue tests: firing its due schedules every 0.5s, one "
                     f"line per round that fired. Stop it with `kill {proc.pid}`.\n")
    assert proc.returncode == 0 and out == ""


@pytest.mark.parametrize("payload", [
    {"at": datetime(2030, 1, 1, tzinfo=UTC)},  # an earlier apply's unquoted timestamp
    {"n": float("nan"), "raw": Binary(b"hi")},  # an earlier apply's .nan and !!binary
])
def test_a_stored_payload_beyond_json_still_fires(run_cli, schedules, payload):
    """`apply` refuses YAML values that JSON lacks, at the file; a schedule already stored
    with one (by an earlier version's apply, or another program: design.md gives the
    payload an activity's bounds, which take any BSON) is no malformed schedule: read as
    malformed, the firer would unset its next fire and it would never fire again."""
    assert run_cli("schedule", "add", "t", "--type", "t", "--every", "1m").code == 0
    schedules.update_one({"_id": "t"}, {"$set": {"activity.payload": payload}})
    schedules.update_one({"_id": "t"}, {"$set": {"next_fire_at": schedules.find_one(
        {"_id": "t"})["created_at"]}})
    r = run_cli("scheduler", "--once", "-o", "jsonl")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["fired"] == 1, r.stdout
    doc = schedules.find_one({"_id": "t"})
    assert "problem" not in doc and doc.get("next_fire_at") is not None, doc
    assert json.loads(run_cli("schedule", "show", "t", "-o", "json").stdout).get(
        "problem") is None


def test_buffer_one_from_the_command_line_holds_a_fire_and_shows_it(run_cli, schedules):
    assert run_cli("schedule", "add", "b", "--type", "t", "--every", "1m",
                   "--overlap", "buffer_one").code == 0

    def due_now() -> None:
        doc = schedules.find_one({"_id": "b"})
        schedules.update_one({"_id": "b"}, {"$set": {"next_fire_at": doc["created_at"]}})

    due_now()
    assert json.loads(run_cli("scheduler", "--once", "-o", "jsonl").stdout)["fired"] == 1
    due_now()  # due again while the first fire's activity is pending: held back
    assert run_cli("scheduler", "--once").code == 0
    shown = run_cli("schedule", "show", "b")
    assert "overlap=buffer_one" in shown.stdout
    assert "buffered:" in shown.stdout and "waits for the last fire's activity" in shown.stdout
    [row] = json.loads(run_cli("schedule", "list", "-o", "json").stdout)
    assert row["buffered"]["kind"] == "on_time"
    r = run_cli("schedule", "add", "c", "--type", "t", "--every", "1m", "--overlap", "queue")
    assert r.code == 2 and "buffer_one" in r.stderr  # the policies named in the error


def test_every_change_is_audited_with_its_command(run_cli, tmp_path):
    assert run_cli("schedule", "add", "a", "--type", "t", "--every", "1m").code == 0
    assert run_cli("schedule", "pause", "a", "--reason", "freeze").code == 0
    assert run_cli("schedule", "resume", "a").code == 0
    assert run_cli("schedule", "trigger", "a").code == 0
    assert run_cli("schedule", "remove", "a", "--actor", "ops").code == 0
    r = run_cli("audit", "-o", "jsonl")
    entries = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["action"] for e in entries] == ["schedule remove", "schedule trigger",
                                              "schedule resume", "schedule pause",
                                              "schedule add"]
    assert all("schedule" in e["detail"]["command"] for e in entries), entries[0]
    assert entries[0]["actor"] == "ops" and entries[3]["reason"] == "freeze"


def test_list_and_show_fit_80_columns(run_cli):
    name = "nightly-charge-of-every-subscription"
    assert run_cli("schedule", "add", name, "--type", "charge", "--cron", "30 2 * * 1-5",
                   "--timezone", "America/Argentina/Buenos_Aires", "--overlap", "skip",
                   "--missed", "all", "--jitter", "30s").code == 0
    assert run_cli("schedule", "trigger", name).code == 0
    for args in (("schedule", "list"), ("schedule", "show", name)):
        r = run_cli(*args, env={"COLUMNS": "80"})
        assert r.code == 0, r.stderr
        assert max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout

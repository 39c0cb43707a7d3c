"""Bad input everywhere: one line on stderr, a documented exit code, no traceback, no write."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from runnerq_cli.cli.exits import ExitCode

UNREACHABLE = "mongodb://u:s3cret@127.0.0.1:1/"
FAST_FAIL = {"RUNNERQ_SERVER_SELECTION_TIMEOUT": "0.5s", "RUNNERQ_CONNECT_TIMEOUT": "0.5s"}


@pytest.fixture
def activities(server, db_name):
    with MongoClient(server.uri, uuidRepresentation="standard") as client:
        yield client[db_name]["runnerq_tests_activities"]


def assert_one_line_error(result, code: ExitCode, *fragments: str) -> None:
    assert result.code == code, (result.code, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]


BAD_ENQUEUE = [
    (["-p", "{bad json"], "malformed JSON"),
    (["-p", "[1, 2]"], "must be a JSON object, got list"),
    (["-p", '"text"'], "must be a JSON object, got str"),
    (["-p", "null"], "must be a JSON object, got null"),
    (["-p", "@/nonexistent/payload.json"], "cannot read"),
    (["-p", "{}", "--priority", "urgent"], "unknown priority 'urgent'"),
    (["-p", "{}", "--priority", "5"], "unknown priority '5'"),
    (["-p", "{}", "--delay", "-5s"], "--delay must not be negative"),
    (["-p", "{}", "--delay", "soon"], "--delay"),
    (["-p", "{}", "--at", "next tuesday"], "--at: expected an ISO-8601 time"),
    (["-p", "{}", "--at", "2030-01-01T00:00:00Z", "--delay", "1m"], "not both"),
    (["-p", "{}", "--timeout", "0"], "--timeout"),
    (["-p", "{}", "--timeout", "1.5s"], "whole seconds"),
    (["-p", "{}", "--retry-delay", "-1"], "--retry-delay"),
    (["-p", "{}", "--max-retries", "-1"], "--max-retries"),
    (["-p", "{}", "--max-retries", "many"], "--max-retries"),
    (["-p", "{}", "--metadata", "novalue"], "KEY=VALUE"),
    (["-p", "{}", "--on-duplicate", "sometimes"], "unknown --on-duplicate"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_ENQUEUE,
                         ids=[" ".join(a) for a, _ in BAD_ENQUEUE])
def test_bad_enqueue_input(run_cli, activities, args: list[str], fragment: str) -> None:
    result = run_cli("enqueue", "t", *args)
    assert_one_line_error(result, ExitCode.USAGE, fragment)
    assert result.stdout == ""
    assert activities.count_documents({}) == 0


@pytest.mark.parametrize("args", [BAD_ENQUEUE[0][0], BAD_ENQUEUE[5][0], BAD_ENQUEUE[7][0]])
def test_input_is_validated_before_connecting(run_cli, args: list[str]) -> None:
    """An unreachable server is never waited for when the input is bad anyway."""
    started = time.monotonic()
    result = run_cli("--uri", UNREACHABLE, "enqueue", "t", *args,
                     env={"RUNNERQ_SERVER_SELECTION_TIMEOUT": "30s"})
    assert time.monotonic() - started < 5
    assert_one_line_error(result, ExitCode.USAGE)


def test_a_payload_the_shell_split_is_told_to_be_quoted(run_cli, activities) -> None:
    """`-p {a: 1}` unquoted reaches us as two words: the usage error says to quote it."""
    result = run_cli("enqueue", "t", "-p", "{a:", "1}")
    assert_one_line_error(result, ExitCode.USAGE, "quote a JSON payload so the shell passes "
                                                  "it as one word")
    assert activities.count_documents({}) == 0


@pytest.mark.parametrize("command", [["enqueue", "t", "-p", "{}"], ["init-indexes"],
                                     ["enqueue", "--from", "-"]])
def test_invalid_queue_name(run_cli, activities, command: list[str]) -> None:
    result = run_cli("--queue", "a b", *command, input='{"type": "t"}\n')
    assert_one_line_error(result, ExitCode.USAGE, "--queue", "invalid queue name 'a b'")
    assert activities.count_documents({}) == 0
    assert not [n for n in activities.database.list_collection_names() if " " in n]


def test_queue_name_from_env_is_a_config_error(run_cli, activities) -> None:
    result = run_cli("enqueue", "t", "-p", "{}", env={"RUNNERQ_QUEUE": "x/../y"})
    assert_one_line_error(result, ExitCode.CONFIG, "RUNNERQ_QUEUE", "invalid queue name")
    assert activities.count_documents({}) == 0


@pytest.mark.parametrize(("text", "fragment"), [
    ("queue: [oops\n", "malformed YAML"),
    ("databse: x\n", "unknown key 'databse'"),
    ("lease: -1\n", "'lease'"),
])
@pytest.mark.parametrize("command", [["enqueue", "t", "-p", "{}"], ["init-indexes"]])
def test_bad_config_file(run_cli, activities, tmp_path: Path, text: str, fragment: str,
                         command: list[str]) -> None:
    config = tmp_path / "runnerq.yaml"
    config.write_text(text)
    result = run_cli("--config", str(config), *command)
    assert_one_line_error(result, ExitCode.CONFIG, str(config), fragment)
    assert activities.count_documents({}) == 0
    assert activities.database.list_collection_names() == []


@pytest.mark.parametrize("command", [["enqueue", "t", "-p", "{}"], ["init-indexes"],
                                     ["init-indexes", "--check"], ["enqueue", "--from", "-"]])
def test_unreachable_server_fails_fast_without_the_password(run_cli, activities,
                                                            command: list[str]) -> None:
    started = time.monotonic()
    result = run_cli("--uri", UNREACHABLE, *command, env=FAST_FAIL, input='{"type": "t"}\n')
    elapsed = time.monotonic() - started
    assert_one_line_error(result, ExitCode.UNAVAILABLE, "unreachable", "u:****@127.0.0.1:1")
    assert "s3cret" not in result.stdout + result.stderr
    assert elapsed < 5, f"took {elapsed:.1f}s; server_selection_timeout is 0.5s"
    assert activities.count_documents({}) == 0


def test_password_in_a_bad_uri_is_not_shown(run_cli) -> None:
    result = run_cli("--uri", "mongodb://u:s3cret@host:notaport/", "enqueue", "t", "-p", "{}")
    assert result.code in (ExitCode.USAGE, ExitCode.UNAVAILABLE)
    assert "s3cret" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_unknown_option_is_a_usage_error(run_cli) -> None:
    result = run_cli("enqueue", "t", "--colour", "red")
    assert_one_line_error(result, ExitCode.USAGE, "--colour")


# ------------------------------------------------ as a real process (console script)


@pytest.mark.parametrize(("args", "env", "code", "fragment"), [
    (["enqueue", "t", "-p", "[1]"], {}, ExitCode.USAGE, "JSON object"),
    (["--queue", "a b", "init-indexes"], {}, ExitCode.USAGE, "invalid queue name"),
    (["--uri", UNREACHABLE, "enqueue", "t", "-p", "{}"], FAST_FAIL, ExitCode.UNAVAILABLE,
     "unreachable"),
    (["--uri", UNREACHABLE, "config", "show"], {}, ExitCode.OK, ""),
])
def test_subprocess_errors_have_no_traceback(run_cli_subprocess, activities, args: list[str],
                                             env: dict[str, str], code: ExitCode,
                                             fragment: str) -> None:
    started = time.monotonic()
    result = run_cli_subprocess(*args, env=env)
    assert time.monotonic() - started < 15
    assert result.code == code, result.stderr
    assert "Traceback" not in result.stderr
    assert "s3cret" not in result.stdout + result.stderr
    if code:
        assert len(result.stderr.splitlines()) == 1 and fragment in result.stderr
    assert activities.count_documents({}) == 0


def test_subprocess_bad_config_file(run_cli_subprocess, tmp_path: Path) -> None:
    config = tmp_path / "runnerq.yaml"
    config.write_text("worker:\n  concurrency: lots\n")
    result = run_cli_subprocess("enqueue", "t", "-p", "{}", env={"RUNNERQ_CONFIG": str(config)})
    assert result.code == ExitCode.CONFIG
    assert result.stderr.splitlines() == [
        f"error: config {config}: key 'worker.concurrency': expected a whole number, "
        "got 'lots'"]


def test_reads_of_a_misspelt_queue_say_it_does_not_exist(run_cli, backend) -> None:
    """A read of a queue that does not exist answers as for an empty one (reads refuse no
    queue), and says so on stderr with the closest queue: a typo of --queue is no longer
    "no pending activities" and exit 0 with nothing to go on."""
    aid = str(backend.enqueue("t", {}).activity_id)  # the queue "tests" exists
    typo = "--queue", "testz"
    listed = run_cli(*typo, "list", "pending")
    assert listed.code == ExitCode.OK and listed.stdout == "no pending activities\n"
    assert listed.stderr.splitlines()[-1] == (
        "warning: queue 'testz' does not exist in database "
        f"'{backend.settings.database}' (did you mean 'tests'?)")
    stats = run_cli(*typo, "stats", "-o", "json")
    assert stats.code == ExitCode.OK and "did you mean 'tests'?" in stats.stderr
    for args in (["limit", "list"], ["schedule", "list"], ["limit", "list", "-o", "json"]):
        empty = run_cli(*typo, *args)  # no limits or schedules: or not that queue?
        assert empty.code == ExitCode.OK and "did you mean 'tests'?" in empty.stderr, args
    for args in (["show", aid], ["show", aid[:8]], ["events", aid[:8]], ["result", aid]):
        shown = run_cli(*typo, *args)
        assert_one_line_error(shown, ExitCode.NOT_FOUND, "; queue 'testz' does not exist",
                              "did you mean 'tests'?")
    doctor = run_cli(*typo, "doctor", "-o", "json")
    indexes = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "indexes")
    assert indexes["status"] == "fail"
    assert indexes["message"].startswith("queue 'testz' does not exist in database")
    assert "did you mean 'tests'?" in indexes["message"]
    assert indexes["fix"].startswith("check --queue and --database")
    # The queue that exists says nothing more, empty or not.
    assert run_cli("list", "failed").stderr == ""
    assert run_cli("limit", "list").stderr == run_cli("schedule", "list").stderr == ""
    assert run_cli("show", "00000000").stderr == "error: no activity id starts with 00000000\n"

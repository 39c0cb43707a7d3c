"""The bad-input catalogue (issue 8, docs/input.md): every class of bad value, in every place.

Each case runs the CLI as a user would and asserts what the product owner asks of bad
input: the documented exit code, exactly one line on stderr starting `error:` (warnings
aside), no traceback, an answer within seconds, and nothing written to the database.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import time
import uuid
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pymongo import MongoClient

from runnerq_cli.cli.exits import ExitCode, exit_code_of

USAGE, CONFIG, UNAVAILABLE = ExitCode.USAGE, ExitCode.CONFIG, ExitCode.UNAVAILABLE
REFUSED_URI = "mongodb://ops:s3cret@127.0.0.1:1/"
SOME_ID = str(uuid.UUID(int=7))
DEEP = "[" * 50_000 + "]" * 50_000
HUGE_INT = "9" * 30
BIG_PAYLOAD_BYTES = 17 * 1024 * 1024  # over MongoDB's 16 MiB


def _event_cursor(offset_ms: int) -> str:
    """An event cursor as tail prints it, with one seen id `offset_ms` after its base."""
    from runnerq_cli.backend.domain.event_cursor import CURSOR_VERSION

    data = {"v": CURSOR_VERSION, "t": datetime.now(UTC).isoformat(), "f": None,
            "s": [["x", offset_ms]]}
    raw = zlib.compress(json.dumps(data).encode())
    return "ec" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _list_cursor(value: object) -> str:
    raw = json.dumps({"s": "pending", "k": [value, value, value]}).encode()
    return "pc" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


# (id, argv, expected exit code, a fragment the error line must contain)
NUMBERS = [
    ("enqueue --timeout nan", ["enqueue", "t", "--timeout", "nan"], USAGE, "--timeout"),
    ("enqueue --timeout inf", ["enqueue", "t", "--timeout", "inf"], USAGE, "finite"),
    ("enqueue --timeout 1e400", ["enqueue", "t", "--timeout", "1e400"], USAGE, "--timeout"),
    ("enqueue --timeout huge", ["enqueue", "t", "--timeout", HUGE_INT], USAGE, "at most"),
    ("enqueue --retry-delay nan", ["enqueue", "t", "--retry-delay", "nan"], USAGE,
     "--retry-delay"),
    ("enqueue --retry-delay inf", ["enqueue", "t", "--retry-delay", "inf"], USAGE,
     "--retry-delay"),
    ("enqueue --max-retries 2**70", ["enqueue", "t", "--max-retries", str(2**70)], USAGE,
     "64 bits"),
    ("enqueue --max-retries nan", ["enqueue", "t", "--max-retries", "nan"], USAGE,
     "--max-retries"),
    ("enqueue --delay nan", ["enqueue", "t", "--delay", "nan"], USAGE, "--delay"),
    ("enqueue --delay inf", ["enqueue", "t", "--delay", "inf"], USAGE, "--delay"),
    ("enqueue --delay 1e400", ["enqueue", "t", "--delay", "1e400"], USAGE, "--delay"),
    ("enqueue --wait-timeout nan", ["enqueue", "t", "--wait", "--wait-timeout", "nan"], USAGE,
     "--wait-timeout"),
    ("wait --timeout nan", ["wait", SOME_ID, "--timeout", "nan"], USAGE, "--timeout"),
    ("wait --timeout inf", ["wait", SOME_ID, "--timeout", "inf"], USAGE, "--timeout"),
    ("worker --lease nan", ["worker", "--burst", "--lease", "nan"], USAGE, "--lease"),
    ("worker --lease inf", ["worker", "--burst", "--lease", "inf"], USAGE, "--lease"),
    ("worker --lease 0.5", ["worker", "--burst", "--lease", "0.5"], USAGE, "--lease"),
    ("worker --poll-interval inf", ["worker", "--burst", "--poll-interval", "inf"], USAGE,
     "--poll-interval"),
    ("worker --poll-interval nan", ["worker", "--burst", "--poll-interval", "nan"], USAGE,
     "--poll-interval"),
    # a bound under a second is named as it is (it read "at least 0s" for 10ms)
    ("worker --poll-interval 5ms", ["worker", "--burst", "--poll-interval", "5ms"], USAGE,
     "--poll-interval: must be at least 10ms, got"),
    ("scheduler --interval 40ms", ["scheduler", "--once", "--interval", "40ms"], USAGE,
     "--interval: must be at least 50ms, got"),
    ("stats --interval 50ms", ["stats", "--watch", "--interval", "50ms"], USAGE,
     "--interval: must be at least 100ms, got"),
    ("worker --shutdown-timeout inf", ["worker", "--burst", "--shutdown-timeout", "inf"],
     USAGE, "--shutdown-timeout"),
    ("worker --concurrency huge", ["worker", "--burst", "--concurrency", HUGE_INT], USAGE,
     "--concurrency"),
    ("workers --stale-after nan", ["workers", "--stale-after", "nan"], USAGE, "--stale-after"),
    ("workers --stale-after 1e400", ["workers", "--stale-after", "1e400"], USAGE,
     "--stale-after"),
    ("stats --window inf", ["stats", "--window", "inf"], USAGE, "--window"),
    ("stats --interval nan", ["stats", "--watch", "--interval", "nan"], USAGE, "--interval"),
    ("stats --check 1e400", ["stats", "--check", "pending < 1e400"], USAGE, "--check"),
    ("tail --poll-interval nan", ["tail", "events", "--no-follow", "--poll-interval", "nan"],
     USAGE, "--poll-interval"),
]

RANGES = [
    ("enqueue --delay 999999999w", ["enqueue", "t", "--delay", "999999999w"], USAGE, "at most"),
    ("enqueue --at past 9999", ["enqueue", "t", "--at", "9999-12-31T23:59:59-14:00"], USAGE,
     "out of range"),
    ("enqueue --at year 1", ["enqueue", "t", "--at", "0001-01-01T00:00:00Z"], USAGE,
     "out of range"),
    ("enqueue --at words", ["enqueue", "t", "--at", "next tuesday"], USAGE, "ISO-8601"),
    ("list --since 1e20", ["list", "pending", "--since", "99999999999999999999"], USAGE,
     "--since"),
    ("list --since 999999999w", ["list", "pending", "--since", "999999999w"], USAGE,
     "--since"),
    ("list --after huge int", ["list", "pending", "--after", _list_cursor(2**80)], USAGE,
     "cursor"),
    ("list --after deep", ["list", "pending", "--after",
                           "pc" + base64.urlsafe_b64encode(b"[" * 3000).decode()], USAGE,
     "cursor"),
    ("tail --since 1e20", ["tail", "events", "--no-follow", "--since", "99999999999999999999"],
     USAGE, "--since"),
    ("tail --resume absurd offset", ["tail", "events", "--no-follow", "--resume",
                                     _event_cursor(10**18)], USAGE, "cursor"),
    ("reschedule --at past 9999", ["reschedule", SOME_ID, "--at", "9999-12-31T23:59:59-14:00"],
     USAGE, "out of range"),
    ("reschedule --delay 999999999w", ["reschedule", SOME_ID, "--delay", "999999999w"], USAGE,
     "at most"),
]

TEXT = [
    ("payload 50000 deep", ["enqueue", "t", "-p", DEEP], USAGE, "nested deeper"),
    ("payload NUL in key", ["enqueue", "t", "-p", '{"a\\u0000b": 1}'], USAGE,
     "cannot be stored"),
    ("payload NaN", ["enqueue", "t", "-p", '{"a": NaN}'], USAGE, "malformed JSON"),
    ("payload Infinity", ["enqueue", "t", "-p", '{"a": -Infinity}'], USAGE, "malformed JSON"),
    ("payload int over 64 bits", ["enqueue", "t", "-p", f'{{"a": {HUGE_INT}}}'], USAGE,
     "cannot be stored"),
    ("payload 5000 digits", ["enqueue", "t", "-p", '{"a": %s}' % ("9" * 5000)], USAGE,
     "malformed JSON"),
    ("payload lone surrogate", ["enqueue", "t", "-p", '{"a": "\\ud800"}'], USAGE,
     "cannot be stored"),
    ("payload $-operator is data", ["enqueue", "t", "-p", '{"a": [1, {"b": 2}]'], USAGE,
     "malformed JSON"),
    ("metadata $ key", ["enqueue", "t", "-m", "$where=1"], USAGE, "metadata key"),
    ("metadata dotted key", ["enqueue", "t", "-m", "a.b=1"], USAGE, "metadata key"),
    ("metadata NUL key", ["enqueue", "t", "-m", "a\x00=1"], USAGE, "metadata key"),
    ("unquoted JSON", ["enqueue", "t", "-p", "{a:", "1}"], USAGE, "quote"),
]

NAMES = [
    ("--database slash", ["--database", "a/b", "init-indexes"], USAGE, "database name"),
    ("--database backslash", ["--database", "a\\b", "init-indexes"], USAGE, "database name"),
    ("--database dot", ["--database", "a.b", "enqueue", "t"], USAGE, "database name"),
    ("--database dollar", ["--database", "a$b", "stats"], USAGE, "database name"),
    ("--database quote", ["--database", 'a"b', "stats"], USAGE, "database name"),
    ("--database space", ["--database", "a b", "list", "pending"], USAGE, "database name"),
    ("--database NUL", ["--database", "a\x00b", "stats"], USAGE, "NUL"),
    ("--database 64 bytes", ["--database", "d" * 64, "stats"], USAGE, "63 bytes"),
    ("--database 32 two-byte chars", ["--database", "é" * 32, "stats"], USAGE, "63 bytes"),
    ("--queue dot", ["--queue", "a.b", "init-indexes"], USAGE, "queue name"),
    ("--queue 65 chars", ["--queue", "q" * 65, "enqueue", "t"], USAGE, "queue name"),
]

URIS = [
    ("--uri http", ["--uri", "http://localhost", "stats"], USAGE, "mongodb://"),
    ("--uri bad option", ["--uri", "mongodb://localhost/?serverSelectionTimeoutMS=abc",
                          "stats"], USAGE, "serverselectiontimeoutms"),
    ("--uri unknown option", ["--uri", "mongodb://localhost/?notAnOption=1", "stats"], USAGE,
     "unknown option 'notAnOption'"),
    ("--uri bad port", ["--uri", "mongodb://u:s3cret@localhost:99999/", "stats"], USAGE,
     "invalid MongoDB URI"),
]

ROUGH_EDGES = [
    ("worker --log-format", ["worker", "--burst", "--log-format", "xml"], USAGE, "--log-format"),
    ("worker --log-level", ["worker", "--burst", "--log-level", "loud"], USAGE, "--log-level"),
    ("--batch-size 0", ["enqueue", "--from", "-", "--batch-size", "0"], USAGE, "--batch-size"),
    ("list unknown status", ["list", "sleeping"], USAGE, "sleeping"),
    ("show bad id", ["show", "not-a-uuid"], USAGE, "UUID"),
    ("--priority superscript", ["enqueue", "t", "--priority", "²"], USAGE, "priority"),
    ("set-priority 5000 digits", ["set-priority", SOME_ID, "9" * 5000], USAGE, "priority"),
    ("enqueue type too long", ["enqueue", "t" * 201], USAGE, "200 characters"),
]

# An empty filter value (`--type "$TYPE"` with TYPE unset) names nothing: refused, never
# read as "no filter" (it showed every activity, tailed every event, and with a status
# and --max cancelled every type's).
EMPTY_FILTERS = [
    ("tail --activity ''", ["tail", "events", "--no-follow", "--activity", ""], USAGE,
     "--activity must not be empty"),
    ("tail --worker blank", ["tail", "events", "--no-follow", "--worker", " "], USAGE,
     "--worker must not be empty"),
    ("tail --type ''", ["tail", "events", "--no-follow", "--type", ""], USAGE,
     "--type must not be empty"),
    ("tail --event ','", ["tail", "events", "--no-follow", "--event", ","], USAGE,
     "--event must not be empty"),
    ("tail --resume ''", ["tail", "events", "--no-follow", "--resume", ""], USAGE,
     "--resume must not be empty"),
    ("tail --cursor-file ''", ["tail", "events", "--no-follow", "--cursor-file", ""], USAGE,
     "--cursor-file must not be empty"),
    ("list --type ''", ["list", "pending", "--type", ""], USAGE, "--type must not be empty"),
    ("list --after ''", ["list", "pending", "--after", ""], USAGE, "--after must not be empty"),
    ("audit --actor ''", ["audit", "--actor", ""], USAGE, "--actor must not be empty"),
    ("audit --action ''", ["audit", "--action", ""], USAGE, "--action must not be empty"),
    ("dlq export --type ''", ["dlq", "export", "--type", ""], USAGE,
     "--type must not be empty"),
    ("redrive --type ''", ["redrive", "--type", "", "--yes"], USAGE,
     "--type must not be empty"),
]

ARGV_CASES = NUMBERS + RANGES + TEXT + NAMES + URIS + ROUGH_EDGES + EMPTY_FILTERS


@pytest.fixture
def database(server, db_name):
    with MongoClient(server.uri) as client:
        yield client[db_name]


def snapshot(database) -> dict[str, int]:
    """Every collection of the test database and its document count."""
    return {name: database[name].count_documents({})
            for name in sorted(database.list_collection_names())}


def assert_clean_error(result, code: int, fragment: str = "", elapsed: float = 0.0) -> str:
    """The documented code, one `error:` line (warnings aside), no traceback, fast."""
    assert result.code == code, (result.code, result.stderr[:2000])
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1, result.stderr[:2000]
    assert lines[0].startswith("error: "), lines[0][:300]
    assert len(lines[0]) < 1000, "a huge value was rendered in the error"
    assert fragment in lines[0], lines[0][:500]
    assert elapsed < 5, f"took {elapsed:.1f}s"
    return lines[0]


@pytest.mark.parametrize(("args", "code", "fragment"),
                         [pytest.param(a, c, f, id=i) for i, a, c, f in ARGV_CASES])
def test_bad_argument(run_cli, database, args: list[str], code: int, fragment: str) -> None:
    before = snapshot(database)
    started = time.monotonic()
    result = run_cli(*args)
    assert_clean_error(result, code, fragment, time.monotonic() - started)
    assert "s3cret" not in result.stdout + result.stderr
    assert snapshot(database) == before


# ------------------------------------------------------------------ files and paths


def _files(tmp: Path) -> dict[str, Path]:
    (tmp / "plain").write_text("x")
    (tmp / "not-sqlite.txt").write_text("this is not a database\n" * 10)
    (tmp / "bad-utf8.json").write_bytes(b'{"a": "\xff\xfe"}')
    (tmp / "deep.json").write_text(DEEP)
    (tmp / "big.json").write_text('{"a": "' + "x" * BIG_PAYLOAD_BYTES + '"}')
    (tmp / "over-limit.json").write_text('{"a": "' + "x" * (8 * 1024 * 1024) + '"}')
    (tmp / "bad-utf8.ndjson").write_bytes(b'{"type": "t", "payload": {"a": "\xff"}}\n')
    (tmp / "deep.ndjson").write_text('{"type": "t", "payload": {"a": ' + DEEP + "}}\n")
    (tmp / "big.ndjson").write_text('{"type": "t", "payload": {"a": "'
                                    + "x" * BIG_PAYLOAD_BYTES + '"}}\n')
    (tmp / "nul-key.ndjson").write_text('{"type": "t", "payload": {"a\\u0000": 1}}\n')
    (tmp / "nan.ndjson").write_text('{"type": "t", "delay": NaN}\n')
    (tmp / "huge-retries.ndjson").write_text(f'{{"type": "t", "max_retries": {HUGE_INT}}}\n')
    (tmp / "far-delay.ndjson").write_text('{"type": "t", "delay": "999999999w"}\n')
    (tmp / "far-at.ndjson").write_text('{"type": "t", "at": "9999-12-31T23:59:59-14:00"}\n')
    (tmp / "timeout-float.ndjson").write_text('{"type": "t", "timeout": 1e400}\n')
    (tmp / "cursor-bad-utf8").write_bytes(b"ec\xff\xfe")
    (tmp / "cursor-absurd").write_text(_event_cursor(10**18))
    return {p.name: p for p in tmp.iterdir()}


# These start the dev server itself (mongoeco: Python 3.13+), not a client of one.
NEEDS_DEV_SERVER = pytest.mark.skipif(importlib.util.find_spec("mongoeco") is None,
                                      reason="the dev server needs mongoeco (Python 3.13+)")
PATH_CASES: list = [
    ("payload @ bad UTF-8", ["enqueue", "t", "-p", "@{bad-utf8.json}"], USAGE, "UTF-8"),
    ("payload @ 50000 deep", ["enqueue", "t", "-p", "@{deep.json}"], USAGE, "nested deeper"),
    ("payload @ 17 MB", ["enqueue", "t", "-p", "@{big.json}"], USAGE, "limit"),
    ("payload @ 8 MiB", ["enqueue", "t", "-p", "@{over-limit.json}"], USAGE, "16 MiB"),
    ("payload @ directory", ["enqueue", "t", "-p", "@{dir}"], USAGE, "directory"),
    ("--from bad UTF-8 line", ["enqueue", "--from", "{bad-utf8.ndjson}"], USAGE, "rejected"),
    ("--from 50000 deep line", ["enqueue", "--from", "{deep.ndjson}"], USAGE, "rejected"),
    ("--from 17 MB line", ["enqueue", "--from", "{big.ndjson}"], USAGE, "rejected"),
    ("--from NUL key", ["enqueue", "--from", "{nul-key.ndjson}"], USAGE, "rejected"),
    ("--from NaN delay", ["enqueue", "--from", "{nan.ndjson}"], USAGE, "rejected"),
    ("--from huge max_retries", ["enqueue", "--from", "{huge-retries.ndjson}"], USAGE,
     "rejected"),
    ("--from far delay", ["enqueue", "--from", "{far-delay.ndjson}"], USAGE, "rejected"),
    ("--from far at", ["enqueue", "--from", "{far-at.ndjson}"], USAGE, "rejected"),
    ("--from timeout 1e400", ["enqueue", "--from", "{timeout-float.ndjson}"], USAGE,
     "rejected"),
    ("--from strict", ["enqueue", "--from", "{big.ndjson}", "--strict"], USAGE,
     "nothing written"),
    ("--from directory", ["enqueue", "--from", "{dir}"], USAGE, "directory"),
    ("--from missing", ["enqueue", "--from", "{dir}/missing.ndjson"], USAGE, "no such file"),
    ("--cursor-file directory", ["tail", "events", "--no-follow", "--cursor-file", "{dir}"],
     USAGE, "directory"),
    ("--cursor-file missing dir", ["tail", "events", "--no-follow", "--cursor-file",
                                   "{dir}/missing/cursor"], USAGE, "does not exist"),
    ("--cursor-file under a file", ["tail", "events", "--no-follow", "--cursor-file",
                                    "{plain}/cursor"], USAGE, "under a file"),
    ("--cursor-file bad UTF-8", ["tail", "events", "--no-follow", "--cursor-file",
                                 "{cursor-bad-utf8}"], USAGE, "UTF-8"),
    ("--cursor-file absurd offset", ["tail", "events", "--no-follow", "--cursor-file",
                                     "{cursor-absurd}"], USAGE, "cursor"),
    ("dev-server --path missing dir", ["dev-server", "--port", "0", "--path",
                                       "{dir}/missing/data.sqlite"], USAGE, "--path"),
    pytest.param(["dev-server", "--port", "0", "--path", "{not-sqlite.txt}"], USAGE, "SQLite",
                 id="dev-server --path not SQLite", marks=NEEDS_DEV_SERVER),
    pytest.param(["dev-server", "--port", "0", "--host", "192.0.2.1"], USAGE, "cannot listen",
                 id="dev-server --host not here", marks=NEEDS_DEV_SERVER),
    ("--config directory", ["--config", "{dir}", "config", "show"], CONFIG, "directory"),
    ("--config missing", ["--config", "{dir}/missing.yaml", "stats"], CONFIG, "no such file"),
]


@pytest.fixture(scope="module")
def input_files(tmp_path_factory) -> dict[str, Path]:
    return _files(tmp_path_factory.mktemp("bad-input"))


@pytest.mark.timeout(60)  # a dev-server case that wrongly starts must not hang the suite
@pytest.mark.parametrize(("args", "code", "fragment"),
                         [case if hasattr(case, "marks")  # already a pytest.param
                          else pytest.param(*case[1:], id=case[0]) for case in PATH_CASES])
def test_bad_file_or_path(run_cli, database, input_files, args: list[str], code: int,
                          fragment: str) -> None:
    directory = str(next(iter(input_files.values())).parent)
    argv = []
    for arg in args:  # {name} is a file made by _files, {dir} their directory
        for name, path in input_files.items():
            arg = arg.replace("{" + name + "}", str(path))
        argv.append(arg.replace("{dir}", directory))
    assert not [a for a in argv if "{" in a and "}" in a], argv
    before = snapshot(database)
    started = time.monotonic()
    result = run_cli(*argv)
    assert_clean_error(result, code, fragment, time.monotonic() - started)
    assert snapshot(database) == before


# Every option that reads a file, as ({path} is the file): the command, its exit code.
FILE_INPUTS = [
    ("schedule apply", ["schedule", "apply", "{path}"], USAGE),
    ("--payload @FILE", ["enqueue", "t", "-p", "@{path}"], USAGE),
    ("enqueue --from", ["enqueue", "--from", "{path}"], USAGE),
    ("dlq import", ["dlq", "import", "{path}"], USAGE),
    ("--config", ["--config", "{path}", "stats"], CONFIG),
    ("console --token-file", ["console", "--port", "0", "--token-file", "{path}"], USAGE),
    ("console --ui", ["console", "--port", "0", "--ui", "{path}"], USAGE),
]


def _run_waiting(cli_env, argv: list[str], **options) -> tuple[object, float]:
    """The CLI in a process of its own, so that a hang is a failed test, not a stuck run."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runnerq_cli", *argv], capture_output=True,
                          env=cli_env, timeout=30, **options)
    result = type("R", (), {"code": proc.returncode, "stdout": proc.stdout.decode(),
                            "stderr": proc.stderr.decode()})
    return result, time.monotonic() - started


@pytest.mark.parametrize(("args", "code"), [pytest.param(a, c, id=i) for i, a, c in FILE_INPUTS])
@pytest.mark.parametrize("kind", ["FIFO without a writer", "device"])
def test_a_file_that_would_hang_is_refused_at_once(cli_env, database, tmp_path: Path,
                                                   args: list[str], code: int,
                                                   kind: str) -> None:
    """Opening a FIFO nothing writes to blocks until a writer comes (and SIGTERM does not
    end the wait); /dev/zero never ends. Both are one line and the input's exit code."""
    if kind == "device":
        path = "/dev/zero"
    else:
        path = str(tmp_path / "input.fifo")
        os.mkfifo(path)
    before = snapshot(database)
    result, elapsed = _run_waiting(cli_env, [a.replace("{path}", path) for a in args])
    fragment = "nothing writing to it" if kind != "device" else "a device, not a file"
    assert_clean_error(result, code, fragment, elapsed)
    assert snapshot(database) == before


def test_a_pipe_with_a_writer_reads_as_a_file(cli_env, database) -> None:
    """`<(command)` (a pipe as /dev/fd/N) still works: written before the open, or after
    it (a writer there, nothing written yet, then the schedules)."""
    import threading

    schedules = b"- {name: piped, type: t, every: 10m}\n"
    for late in (False, True):
        read_end, write_end = os.pipe()
        if not late:
            os.write(write_end, schedules)
            os.close(write_end)
        else:
            def write_later(fd: int = write_end) -> None:
                time.sleep(0.5)
                os.write(fd, schedules)
                os.close(fd)

            threading.Thread(target=write_later, daemon=True).start()
        try:
            result, _ = _run_waiting(cli_env, ["schedule", "apply", f"/dev/fd/{read_end}",
                                               "--dry-run"], pass_fds=(read_end,))
        finally:
            os.close(read_end)
        assert result.code == 0, result.stderr
        assert "would create piped" in result.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_cursor_file(run_cli, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    result = run_cli("tail", "events", "--no-follow", "--cursor-file", str(locked / "c"))
    assert_clean_error(result, USAGE, "permission denied")


def test_bad_utf8_on_stdin(cli_env, database) -> None:
    """Bytes that are not UTF-8 on standard input: a payload and NDJSON lines."""
    before = snapshot(database)
    # (stdin is read only when asked for: -p @- or --from -)
    for args in (["enqueue", "t", "-p", "@-"], ["enqueue", "--from", "-"]):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "runnerq_cli", *args],
                              input=b'{"type": "t", "payload": {"a": "\xff"}}\n',
                              capture_output=True, env=cli_env, timeout=60)
        result = type("R", (), {"code": proc.returncode, "stdout": proc.stdout.decode(),
                                "stderr": proc.stderr.decode()})
        assert_clean_error(result, USAGE, "", time.monotonic() - started)
    assert snapshot(database) == before


# ------------------------------------------------------------------ the config file

BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"]
                 + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]"
                    for i in range(8)]) + "\nlease: *i\n"

CONFIG_CASES = [
    ("lease list", "lease: [1, 2]\n", "'lease'"),
    ("lease null", "lease: null\n", "'lease'"),
    ("lease mapping", "lease: {a: 1}\n", "'lease'"),
    ("lease .nan", "lease: .nan\n", "'lease'"),
    ("lease .inf", "lease: .inf\n", "'lease'"),
    ("lease -.inf", "lease: -.inf\n", "'lease'"),
    ("lease date", "lease: 2030-01-01\n", "'lease'"),
    ("lease bool", "lease: true\n", "'lease'"),
    ("lease 1e400", "lease: 1e400\n", "'lease'"),
    ("lease huge int", f"lease: {HUGE_INT}\n", "'lease'"),
    ("lease 999999999w", "lease: 999999999w\n", "'lease'"),
    ("concurrency huge", f"worker:\n  concurrency: {HUGE_INT}\n", "'worker.concurrency'"),
    ("concurrency .nan", "worker:\n  concurrency: .nan\n", "'worker.concurrency'"),
    ("concurrency 2.5", "worker:\n  concurrency: 2.5\n", "'worker.concurrency'"),
    ("poll_interval .inf", "worker:\n  poll_interval: .inf\n", "'worker.poll_interval'"),
    ("server_selection_timeout 0", "server_selection_timeout: 0\n",
     "'server_selection_timeout'"),
    ("log_level list", "worker:\n  log_level: [info]\n", "'worker.log_level'"),
    ("worker not a mapping", "worker: 4\n", "unknown key 'worker'"),
    ("huge value", "lease: " + "9" * 100_000 + "x\n", "'lease'"),
    ("huge number", "lease: " + "9" * 100_000 + "\n", "malformed YAML"),
    ("long number", "lease: " + "9" * 4000 + "\n", "'lease'"),
    ("database dotted", "database: a.b\n", "'database'"),
    ("queue space", "queue: a b\n", "'queue'"),
    ("uri http", "uri: http://localhost\n", "'uri'"),
    ("uri bad option", "uri: mongodb://u:s3cret@h/?connectTimeoutMS=abc\n", "'uri'"),
    ("alias bomb", BOMB, "aliases"),
    ("harmless alias", "x: &x 30s\nlease: *x\n", "aliases"),
    ("misspelt key", "leese: 30s\n", "did you mean 'lease'"),
    ("misspelt nested key", "worker:\n  concurency: 2\n", "did you mean 'worker.concurrency'"),
    ("non-text key", "1: 2\n", "keys must be text"),
    ("top-level list", "- lease\n", "mapping"),
    ("malformed", "lease: [30s\n", "malformed YAML"),
    ("unhashable key", "? [a]\n: 1\n", "malformed YAML"),
    ("larger than 1 MiB", "# " + "x" * (1024 * 1024) + "\nlease: 30s\n", "larger than"),
    ("control character", "lease: 30s\x07\n", "malformed YAML"),
    # text no UTF-8 can hold, from a YAML escape: refused as the key's, never exit 1 from
    # deep inside the driver (a BSON name, the authentication) after connecting
    ("database surrogate escape", 'database: "a\\udcff"\n', "'database': not valid UTF-8"),
    ("uri password surrogate escape", 'uri: "mongodb://u:s3cret\\udcff@127.0.0.1:1/"\n',
     "'uri': not valid UTF-8"),
    ("exec type surrogate escape", 'worker:\n  exec: {"t\\ud800": cat}\n',
     "'worker.exec': not valid UTF-8"),
    # an empty or blank type or value in worker.exec / worker.handlers / worker.types: the
    # key's error (exit 3), as --exec '=cat' is the flag's; never a type "  " claimed
    ("exec empty type", 'worker:\n  exec: {"": cat}\n', "'worker.exec': an empty type"),
    ("exec blank type", 'worker:\n  exec: {"  ": cat}\n', "'worker.exec': an empty type"),
    ("exec empty command", 'worker:\n  exec: {t: ""}\n', "'worker.exec': type 't' has an"),
    ("handlers empty type", 'worker:\n  handlers: {"": "m:f"}\n', "'worker.handlers'"),
    ("handlers blank value", 'worker:\n  handlers: {t: " "}\n', "'worker.handlers'"),
    ("types empty entry", 'worker:\n  types: ["", t]\n', "'worker.types': an empty type"),
]


@pytest.mark.parametrize(("text", "fragment"),
                         [pytest.param(t, f, id=i) for i, t, f in CONFIG_CASES])
def test_bad_config_file(run_cli, database, tmp_path: Path, text: str, fragment: str) -> None:
    config = tmp_path / "runnerq.yaml"
    config.write_text(text)
    before = snapshot(database)
    for command in (["config", "show"], ["enqueue", "t"]):
        started = time.monotonic()
        result = run_cli("--config", str(config), *command)
        line = assert_clean_error(result, CONFIG, fragment, time.monotonic() - started)
        assert str(config) in line and "s3cret" not in result.stderr
    assert snapshot(database) == before


def test_config_file_not_utf8(run_cli, tmp_path: Path) -> None:
    config = tmp_path / "runnerq.yaml"
    config.write_bytes(b"queue: caf\xe9\n")
    assert_clean_error(run_cli("--config", str(config), "config", "show"), CONFIG, "UTF-8")


def test_alias_bomb_is_refused_at_once_in_a_real_process(run_cli_subprocess,
                                                         tmp_path: Path) -> None:
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB)
    assert len(BOMB) < 600
    started = time.monotonic()
    result = run_cli_subprocess("--config", str(config), "config", "show", timeout=30)
    assert_clean_error(result, CONFIG, "aliases", time.monotonic() - started)


# ------------------------------------------------------------------ the environment

ENV_CASES = [
    ("RUNNERQ_LEASE nan", {"RUNNERQ_LEASE": "nan"}, "RUNNERQ_LEASE"),
    ("RUNNERQ_LEASE inf", {"RUNNERQ_LEASE": "inf"}, "RUNNERQ_LEASE"),
    ("RUNNERQ_LEASE 1e400", {"RUNNERQ_LEASE": "1e400"}, "RUNNERQ_LEASE"),
    ("RUNNERQ_WORKER_CONCURRENCY huge", {"RUNNERQ_WORKER_CONCURRENCY": HUGE_INT},
     "RUNNERQ_WORKER_CONCURRENCY"),
    ("RUNNERQ_WORKER_POLL_INTERVAL inf", {"RUNNERQ_WORKER_POLL_INTERVAL": "inf"},
     "RUNNERQ_WORKER_POLL_INTERVAL"),
    ("RUNNERQ_SERVER_SELECTION_TIMEOUT nan", {"RUNNERQ_SERVER_SELECTION_TIMEOUT": "nan"},
     "RUNNERQ_SERVER_SELECTION_TIMEOUT"),
    ("RUNNERQ_RESULTS_TTL 999999999w", {"RUNNERQ_RESULTS_TTL": "999999999w"},
     "RUNNERQ_RESULTS_TTL"),
    ("RUNNERQ_EVENTS_TTL 80 years", {"RUNNERQ_EVENTS_TTL": "4200w"}, "RUNNERQ_EVENTS_TTL"),
    ("RUNNERQ_DATABASE dotted", {"RUNNERQ_DATABASE": "a.b"}, "RUNNERQ_DATABASE"),
    ("RUNNERQ_DATABASE 64 bytes", {"RUNNERQ_DATABASE": "d" * 64}, "RUNNERQ_DATABASE"),
    ("RUNNERQ_QUEUE space", {"RUNNERQ_QUEUE": "a b"}, "RUNNERQ_QUEUE"),
    ("RUNNERQ_MONGO_URI http", {"RUNNERQ_MONGO_URI": "http://h"}, "RUNNERQ_MONGO_URI"),
    ("RUNNERQ_MONGO_URI bad option",
     {"RUNNERQ_MONGO_URI": "mongodb://u:s3cret@h/?serverSelectionTimeoutMS=abc"},
     "RUNNERQ_MONGO_URI"),
    ("RUNNERQ_MONGO_URI bad port", {"RUNNERQ_MONGO_URI": "mongodb://u:s3cret@h:notaport/"},
     "RUNNERQ_MONGO_URI"),
    ("RUNNERQ_WORKER_LOG_FORMAT", {"RUNNERQ_WORKER_LOG_FORMAT": "xml"},
     "RUNNERQ_WORKER_LOG_FORMAT"),
    # bytes that are not UTF-8 (Python's lone surrogates): exit 3 naming the variable, the
    # bytes shown escaped and the password never; it was exit 1 (UnicodeEncodeError in
    # the driver's authentication, or in a BSON name)
    ("RUNNERQ_MONGO_URI password not UTF-8",
     {"RUNNERQ_MONGO_URI": "mongodb://u:s3cret\udcff@127.0.0.1:1/"},
     "RUNNERQ_MONGO_URI: not valid UTF-8"),
    ("RUNNERQ_DATABASE not UTF-8", {"RUNNERQ_DATABASE": "a\udcff"},
     "RUNNERQ_DATABASE: not valid UTF-8 (a\\xff)"),
    ("RUNNERQ_WORKER_EXEC not UTF-8", {"RUNNERQ_WORKER_EXEC": "t\udcff=cat"},
     "RUNNERQ_WORKER_EXEC: not valid UTF-8"),
    ("RUNNERQ_WORKER_EXEC empty type", {"RUNNERQ_WORKER_EXEC": "=cat"},
     "RUNNERQ_WORKER_EXEC: an empty type"),
    ("RUNNERQ_WORKER_HANDLERS empty value", {"RUNNERQ_WORKER_HANDLERS": "t="},
     "RUNNERQ_WORKER_HANDLERS: type 't' has an empty value"),
]


@pytest.mark.parametrize(("env", "fragment"), [pytest.param(e, f, id=i) for i, e, f in ENV_CASES])
def test_bad_environment(run_cli, database, env: dict[str, str], fragment: str) -> None:
    before = snapshot(database)
    for command in (["config", "show"], ["enqueue", "t"], ["worker", "--burst"]):
        started = time.monotonic()
        result = run_cli(*command, env=env)
        line = assert_clean_error(result, CONFIG, fragment, time.monotonic() - started)
        assert "s3cret" not in line
    assert snapshot(database) == before


def test_misspelt_environment_variable_is_named_with_the_closest(run_cli) -> None:
    result = run_cli("config", "show", env={"RUNNERQ_WORKER_CONCURENCY": "8"})
    assert result.code == 0
    assert result.stderr.splitlines() == [
        "warning: ignoring unknown environment variable RUNNERQ_WORKER_CONCURENCY "
        "(did you mean RUNNERQ_WORKER_CONCURRENCY?)"]


# ------------------------------------------------------------------ no server

UNREACHABLE_COMMANDS = [
    ["enqueue", "t"],
    ["enqueue", "--from", "-"],
    ["list", "pending"],
    ["show", SOME_ID],
    ["events", SOME_ID],
    ["result", SOME_ID],
    ["wait", SOME_ID],
    ["workers"],
    ["stats"],
    ["init-indexes"],
    ["cancel", SOME_ID],
    ["redrive", "--yes"],
    ["purge", "--yes"],
    ["worker", "--burst"],
    ["tail", "events", "--since", "1m"],
    ["tail", "events", "--no-follow"],
    ["tail", "events"],
]


@pytest.mark.parametrize("count", ["0", "-1", "257", HUGE_INT, "9" * 4000])
@pytest.mark.parametrize("mode", [[], ["--dry-run"], ["--check"]], ids=" ".join)
def test_partitions_out_of_range_are_refused_before_the_server(run_cli, count: str,
                                                               mode: list[str]) -> None:
    """An out-of-range --partitions is bad input, exit 2 at once, even with no server (it
    was checked after connecting: exit 6 on a closed port), and a long number is cut."""
    started = time.monotonic()
    result = run_cli("init-indexes", "--partitions", count, *mode,
                     env={"RUNNERQ_MONGO_URI": REFUSED_URI})
    assert_clean_error(result, USAGE, "--partitions must be a whole number from 1 to 256",
                       time.monotonic() - started)
    assert "s3cret" not in result.stderr


@pytest.mark.parametrize("command", UNREACHABLE_COMMANDS, ids=" ".join)
def test_refused_connection_is_an_answer(run_cli, command: list[str]) -> None:
    """Nothing listens: exit 6 within about a second, in our words, with a hint."""
    started = time.monotonic()
    result = run_cli(*command, env={"RUNNERQ_MONGO_URI": REFUSED_URI,
                                    "RUNNERQ_SERVER_SELECTION_TIMEOUT": "30s"},
                     input='{"type": "t"}\n')
    elapsed = time.monotonic() - started
    line = assert_clean_error(result, UNAVAILABLE, "refused the connection", elapsed)
    assert elapsed < 2.5, f"took {elapsed:.1f}s"
    assert "runnerq-mongo dev-server" in line and "RUNNERQ_MONGO_URI" in line
    assert "socketTimeoutMS" not in line and "s3cret" not in line
    assert result.stdout == ""


@pytest.fixture
def silent_server():
    """A port that accepts TCP connections and never answers (a hung server)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"mongodb://127.0.0.1:{listener.getsockname()[1]}/?directConnection=true"


@pytest.mark.parametrize("command", [["stats"], ["tail", "events", "--since", "1m"],
                                     ["tail", "events", "--no-follow"], ["enqueue", "t"]],
                         ids=" ".join)
def test_silent_server_fails_within_the_selection_bound(run_cli, silent_server,
                                                        command: list[str]) -> None:
    started = time.monotonic()
    result = run_cli(*command, env={"RUNNERQ_MONGO_URI": silent_server,
                                    "RUNNERQ_SERVER_SELECTION_TIMEOUT": "0.5s",
                                    "RUNNERQ_CONNECT_TIMEOUT": "0.3s"})
    line = assert_clean_error(result, UNAVAILABLE, "no answer within 0.5s",
                              time.monotonic() - started)
    assert "socketTimeoutMS" not in line


# ------------------------------------------------------------------ rough edges


def test_declined_confirmation_is_exit_2_and_changes_nothing(cli_env, queue, database,
                                                             monkeypatch, capsys) -> None:
    from runnerq_cli.cli.app import main

    aid = queue.enqueue("job", {}, max_retries=1).activity_id
    claim = queue.dequeue("w1", types=["job"])[0]
    queue.ack_failure(claim, "boom")
    before = snapshot(database)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for key, value in cli_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    capsys.readouterr()
    code = main(["redrive"])
    out, err = capsys.readouterr()
    result = type("R", (), {"code": code, "stdout": out, "stderr": err})
    assert_clean_error(result, USAGE, "not confirmed")
    assert queue.get_activity(aid).status == "dead_letter"
    assert snapshot(database) == before


@NEEDS_DEV_SERVER
def test_a_port_taken_between_check_and_start_is_exit_2() -> None:
    from runnerq_cli.cli.devserver import PortInUse, start_in_thread

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with pytest.raises(PortInUse) as raised:
            start_in_thread("127.0.0.1", taken.getsockname()[1])
    assert exit_code_of(raised.value) == USAGE
    assert str(raised.value).count("in use") == 1


def test_catalogue_size() -> None:
    """The issue asks for at least 80 cases across every command, file and the environment."""
    total = (len(ARGV_CASES) + len(PATH_CASES) + len(CONFIG_CASES) + len(ENV_CASES)
             + len(UNREACHABLE_COMMANDS))
    assert total >= 80, total


# ------------------------------------------------------------------ as a real process

PROCESS_CASES = [
    ("deep JSON", ["enqueue", "t", "-p", "[" * 5000 + "]" * 5000], {}, USAGE),
    ("NUL in a key", ["enqueue", "t", "-p", '{"a\\u0000": 1}'], {}, USAGE),
    ("far --at", ["enqueue", "t", "--at", "9999-12-31T23:59:59-14:00"], {}, USAGE),
    ("--database dotted", ["--database", "a.b", "init-indexes"], {}, USAGE),
    ("bad URI option in the environment", ["stats"],
     {"RUNNERQ_MONGO_URI": "mongodb://u:s3cret@h/?serverSelectionTimeoutMS=abc"}, CONFIG),
    ("lease nan in the environment", ["worker", "--burst"], {"RUNNERQ_LEASE": "nan"}, CONFIG),
    ("refused connection", ["tail", "events", "--since", "1m"],
     {"RUNNERQ_MONGO_URI": REFUSED_URI}, UNAVAILABLE),
    ("refused connection, no follow", ["tail", "events", "--no-follow"],
     {"RUNNERQ_MONGO_URI": REFUSED_URI}, UNAVAILABLE),
]


@pytest.mark.parametrize(("args", "env", "code"),
                         [pytest.param(a, e, c, id=i) for i, a, e, c in PROCESS_CASES])
def test_bad_input_in_a_real_process(run_cli_subprocess, database, args: list[str],
                                     env: dict[str, str], code: int) -> None:
    before = snapshot(database)
    started = time.monotonic()
    result = run_cli_subprocess(*args, env=env, timeout=30)
    line = assert_clean_error(result, code, "", time.monotonic() - started)
    assert "s3cret" not in line and not result.stdout
    assert snapshot(database) == before


@pytest.mark.parametrize("types", [[""], ["  "], ["a", ""]], ids=repr)
@pytest.mark.parametrize("action", ["cancel", "set-priority high", "delete"])
def test_an_empty_type_never_widens_a_bulk_action(run_cli, database, types: list[str],
                                                 action: str) -> None:
    """`cancel --type "$TYPE" --status pending --max 100 --yes` with TYPE unset cancelled
    every pending activity of every type (the empty type was dropped, the filter kept its
    status): now exit 2, one line, nothing changed."""
    for activity_type in ("a", "b"):
        assert run_cli("enqueue", activity_type, "-q").code == 0
    before = snapshot(database), sorted(
        (d["activity_type"], d["status"], d["priority"])
        for d in database["runnerq_tests_activities"].find())
    status = "completed" if action == "delete" else "pending"
    flags = [arg for t in types for arg in ("--type", t)]
    words = action.split()
    started = time.monotonic()
    result = run_cli(words[0], *words[1:], *flags, "--status", status, "--max", "100",
                     "--yes")
    assert_clean_error(result, USAGE, "--type must not be empty", time.monotonic() - started)
    assert (snapshot(database), sorted(
        (d["activity_type"], d["status"], d["priority"])
        for d in database["runnerq_tests_activities"].find())) == before


def test_unknown_event_type_is_a_warning_not_an_error(run_cli) -> None:
    result = run_cli("tail", "events", "--no-follow", "--event", "Bogus")
    assert result.code == 0, result.stderr
    assert "warning: unknown event type(s) Bogus" in result.stderr
    assert not [line for line in result.stderr.splitlines() if line.startswith("error:")]

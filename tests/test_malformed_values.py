"""Malformed values are refused as a class, wherever they are typed (issue 23 #9).

- Digits are ASCII: Python's int(), float() and regex \\d also read Arabic-Indic and
  full-width digits ('٤', '２', '١٠m'); every parser of values.py (and the CLI's own
  number options) refuses them like any other malformed value.
- An empty value is a malformed value, never "not given": `--since ''` is refused.
- w=0 in a URI is refused where the URI is checked (keyed enqueues need answers).
- A YAML config with a key given twice is refused; a symlinked --cursor-file is
  written through and a FIFO refused (before it could block).
"""

from __future__ import annotations

import os
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli import times, values
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.errors import InvalidArgument

# Every decimal digit of Unicode that is not ASCII ('٤', '２', '৫', '𝟘', ...).
UNICODE_DIGITS = [chr(c) for c in range(0x80, sys.maxunicode + 1)
                  if unicodedata.category(chr(c)) == "Nd"]


def _parsers() -> list[tuple[str, Any]]:
    return [
        ("number", lambda text: values.number(text, "n")),
        ("integer", lambda text: values.integer(text, "n")),
        ("duration", lambda text: times.duration(text, "d")),
        ("duration with unit", lambda text: times.duration(text + "m", "d")),
        ("duration ms", lambda text: times.duration("1" + text + "ms", "d")),
        ("time ago", lambda text: times.time(text + "m", "t")),
        ("time", lambda text: times.time(f"20{text}6-01-01T00:00:00Z", "t")),
    ]


@pytest.mark.parametrize(("name", "parse"), _parsers(), ids=[n for n, _ in _parsers()])
def test_every_unicode_digit_is_refused_by_every_parser(name: str, parse: Any) -> None:
    assert len(UNICODE_DIGITS) > 600
    for digit in UNICODE_DIGITS:
        with pytest.raises(InvalidArgument):
            parse(digit)
        with pytest.raises(InvalidArgument):
            parse("1" + digit)
    parse("4")  # the ASCII digit is fine


@pytest.mark.parametrize("text", ["", " ", "\t"])
def test_empty_text_is_malformed_for_every_parser(text: str) -> None:
    for _, parse in _parsers()[:3]:
        with pytest.raises(InvalidArgument):
            parse(text)
    with pytest.raises(InvalidArgument):
        times.optional_time(text, "--since")
    assert times.optional_time(None, "--since") is None


def test_w0_is_refused_where_the_uri_is_checked() -> None:
    for uri in ("mongodb://h/?w=0", "mongodb://h/?journal=false&w=0",
                "mongodb+srv://cluster.example.com/?w=0"):
        with pytest.raises(InvalidArgument, match="w=0"):
            values.mongo_uri(uri)
    for uri in ("mongodb://h/?w=1", "mongodb://h/?w=majority", "mongodb://h/"):
        assert values.mongo_uri(uri) == uri


def _one_line(result: Any, code: int = ExitCode.USAGE) -> str:
    assert result.code == code, result
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result
    assert "Traceback" not in result.stderr
    return str(result.stderr)


@pytest.mark.parametrize("args", [
    ["enqueue", "t", "--max-retries", "٤"],
    ["enqueue", "t", "--delay", "١٠m"],
    ["enqueue", "t", "--timeout", "２s"],
    ["enqueue", "--from", "-", "--batch-size", "２"],
    ["enqueue", "--from", "-", "--skip-lines", "٤"],
    ["list", "pending", "--since", "١٠m"],
    ["list", "pending", "--since", ""],
    ["tail", "events", "--since", "", "--no-follow"],
    ["dlq", "export", "--since", ""],
    ["audit", "--since", ""],
    ["cancel", "--type", "t", "--since", "", "--yes"],
    ["--uri", "mongodb://127.0.0.1:27017/?w=0", "enqueue", "t", "--idempotency-key", "k"],
])
def test_on_the_command_line(run_cli: Any, backend: Any, args: list[str]) -> None:
    _one_line(run_cli(*args))
    assert backend.context.activities.count_documents({}) == 0


def test_w0_in_the_environment_is_a_config_error(run_cli: Any, server: Any) -> None:
    uri = server.uri + ("&" if "?" in server.uri else "?") + "w=0"
    err = _one_line(run_cli("enqueue", "t", env={"RUNNERQ_MONGO_URI": uri}), ExitCode.CONFIG)
    assert "w=0" in err


def test_a_key_given_twice_in_the_config_file_is_refused(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "runnerq.yaml"
    path.write_text("queue: a\nworker:\n  concurrency: 2\nqueue: b\n")
    err = _one_line(run_cli("--config", str(path), "config", "show"), ExitCode.CONFIG)
    assert "duplicate key 'queue'" in err and "line 4" in err
    path.write_text("worker:\n  concurrency: 2\n  concurrency: 3\n")
    assert "duplicate key 'concurrency'" in _one_line(
        run_cli("--config", str(path), "config", "show"), ExitCode.CONFIG)


def test_a_fifo_cursor_file_is_refused_at_once(run_cli: Any, tmp_path: Path) -> None:
    fifo = tmp_path / "cursor"
    os.mkfifo(fifo)
    err = _one_line(run_cli("tail", "events", "--no-follow", "--cursor-file", str(fifo)))
    assert "not a regular file" in err


def test_a_symlinked_cursor_file_is_written_through(run_cli: Any, backend: Any,
                                                    tmp_path: Path) -> None:
    backend.enqueue("t", {})
    target = tmp_path / "real.cursor"
    link = tmp_path / "link.cursor"
    link.symlink_to(target)
    result = run_cli("tail", "events", "--since", "1h", "--no-follow", "--cursor-file",
                     str(link))
    assert result.code == 0, result
    assert link.is_symlink() and target.read_text().strip()
    again = run_cli("tail", "events", "--no-follow", "--cursor-file", str(link))
    assert again.code == 0 and again.stdout == "", again  # resumed after the last one


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_skip_lines_past_the_end_reports_the_real_last_line(run_cli: Any, backend: Any,
                                                            tmp_path: Path, source: str) -> None:
    import json

    text = "".join(json.dumps({"type": "t"}) + "\n" for _ in range(4))
    path = tmp_path / "in.ndjson"
    path.write_text(text)
    args = ("--from", str(path)) if source == "file" else ("--from", "-")
    result = run_cli("enqueue", *args, "--skip-lines", "100", "-o", "json",
                     input=text if source == "stdin" else None)
    assert result.code == 0, result
    summary = json.loads(result.stdout)
    assert (summary["lines"], summary["skipped_lines"], summary["last_line"]) == (0, 100, 4)
    assert backend.context.activities.count_documents({}) == 0
    if source == "file":  # the text report says it too, not only "0 of 0 lines"
        text_report = run_cli("enqueue", *args, "--skip-lines", "100")
        assert text_report.code == 0, text_report
        assert "--skip-lines 100 is past the last line, 4" in text_report.stdout


def test_the_strict_spool_is_never_left_behind(cli_env: dict[str, str], backend: Any,
                                               tmp_path: Path) -> None:
    """--strict copies standard input to a temporary file for its second pass: an
    anonymous one, so not even SIGKILL in the middle of it leaves a file behind."""
    import signal
    import subprocess

    from tests.waiting import wait_until

    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "enqueue", "--from", "-",
                             "--strict"], env={**cli_env, "TMPDIR": str(spool_dir)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    fds = Path(f"/proc/{proc.pid}/fd")

    def spooling() -> bool:
        try:
            # open and already unlinked (an O_TMPFILE's, or mkstemp's once removed:
            # where the file system has no O_TMPFILE, tempfile names it for an instant)
            return any(os.readlink(fd).startswith(str(spool_dir))
                       and os.readlink(fd).endswith(" (deleted)") for fd in fds.iterdir())
        except OSError:
            return False

    try:
        proc.stdin.write(b'{"type": "t"}\n' * 10)
        proc.stdin.flush()
        wait_until(spooling, timeout=60, interval=0.02, message="the spool open")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
    assert list(spool_dir.iterdir()) == []
    assert backend.context.activities.count_documents({}) == 0


def test_w0_is_refused_by_connect_too() -> None:
    from runnerq_cli import connect

    with pytest.raises(InvalidArgument, match="w=0"):
        connect("mongodb://127.0.0.1:1/?w=0")

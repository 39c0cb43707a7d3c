"""`enqueue --from` streams and can be interrupted: a SIGTERM midway finishes the batch,
exits 130 and names the last line reached, and `--skip-lines` from that output goes on
without enqueueing anything twice (issue 15). Memory is measured in
benchmarks/bench_enqueue_rss.py, not asserted here."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.exits import ExitCode
from tests.helpers import default_signals
from tests.waiting import wait_until


def _lines(start: int, stop: int) -> str:
    return "".join(json.dumps({"type": "t", "payload": {"n": n}}) + "\n"
                   for n in range(start, stop))


@pytest.mark.proof
def test_sigterm_midway_stops_after_the_batch_and_skip_lines_goes_on_once(
        backend: RunnerQ, cli_env: dict[str, str], run_cli_subprocess: Any,
        tmp_path: Path) -> None:
    # Standard input, so the child cannot finish before the signal however fast the
    # server: the last line is written only after the signal is sent (both fit the pipe).
    total = 301
    activities = backend.context.activities
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "enqueue", "--from", "-",
                             "--batch-size", "5", "-q"], env=cli_env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    assert proc.stdin is not None
    try:
        proc.stdin.write(_lines(0, total - 1))
        proc.stdin.flush()
        wait_until(lambda: activities.count_documents({}) >= 1, timeout=60, interval=0.01,
                   message="the first activities")
        proc.send_signal(signal.SIGTERM)
        proc.stdin.write(_lines(total - 1, total))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert "Traceback" not in err
    [line] = err.splitlines()
    # standard input: the total is unknown, so the lines done (a file says "N of TOTAL")
    found = re.fullmatch(r"error: interrupted: ([\d,]+) lines done, ([\d,]+) enqueued; last "
                         r"line reached (\d+); run again with --skip-lines (\d+) to go on", line)
    assert found, line
    first, enqueued, reached, skip = (int(g.replace(",", "")) for g in found.groups())
    assert enqueued == first == reached == skip  # every line up to there was written
    assert reached > 0
    assert activities.count_documents({}) == reached
    assert len(out.split()) == reached  # -q printed each batch's ids as it was written
    assert {d["payload"]["n"] for d in activities.find()} == set(range(reached))

    path = tmp_path / "all.ndjson"  # the same input, run again from where it stopped
    path.write_text(_lines(0, total))
    rerun = run_cli_subprocess("enqueue", "--from", str(path), "-q", "--skip-lines", str(skip),
                               "--batch-size", "1000", timeout=120)
    assert rerun.code == 0, rerun.stderr
    assert len(rerun.stdout.split()) == total - reached
    assert activities.count_documents({}) == total
    assert sorted(d["payload"]["n"] for d in activities.find()) == list(range(total))


@pytest.mark.parametrize("value", ["-1", "x", "", "1.5", "9223372036854775808"])
def test_bad_skip_lines_is_one_line_and_writes_nothing(
        backend: RunnerQ, run_cli: Any, tmp_path: Path, value: str) -> None:
    path = tmp_path / "in.ndjson"
    path.write_text(_lines(0, 3))
    result = run_cli("enqueue", "--from", str(path), "--skip-lines", value)
    assert result.code == ExitCode.USAGE, result
    assert len(result.stderr.splitlines()) == 1 and "--skip-lines" in result.stderr
    assert backend.context.activities.count_documents({}) == 0


def test_skip_lines_needs_from(backend: RunnerQ, run_cli: Any) -> None:
    result = run_cli("enqueue", "t", "--skip-lines", "2")
    assert result.code == ExitCode.USAGE
    assert result.stderr == "error: --skip-lines applies only to --from\n"
    assert backend.context.activities.count_documents({}) == 0


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_skip_lines_keeps_the_line_numbers_of_the_input(
        backend: RunnerQ, run_cli: Any, tmp_path: Path, source: str) -> None:
    text = _lines(0, 3) + "not json\n\n" + _lines(3, 5)  # lines 1-3, 4 bad, 5 blank, 6-7
    path = tmp_path / "in.ndjson"
    path.write_text(text)
    args = ("--from", str(path)) if source == "file" else ("--from", "-")
    result = run_cli("enqueue", *args, "--skip-lines", "2", "--batch-size", "2", "-o", "json",
                     input=text if source == "stdin" else None)
    assert result.code == ExitCode.USAGE, result
    summary = json.loads(result.stdout)
    assert [a["line"] for a in summary["activities"]] == [3, 6, 7]
    assert [r["line"] for r in summary["rejected"]] == [4]
    assert (summary["lines"], summary["enqueued"], summary["skipped_lines"],
            summary["last_line"], summary["interrupted"]) == (4, 3, 2, 7, False)
    docs = backend.context.activities
    assert sorted(d["payload"]["n"] for d in docs.find()) == [2, 3, 4]
    past = run_cli("enqueue", *args, "--skip-lines", "99",
                   input=text if source == "stdin" else None)
    assert past.code == 0 and past.stdout == (
        "enqueued 0 of 0 lines; --skip-lines 99 is past the last line, 7\n")


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_strict_validates_everything_first_then_writes_in_batches(
        backend: RunnerQ, run_cli: Any, tmp_path: Path, source: str) -> None:
    good = _lines(0, 7)
    path = tmp_path / "in.ndjson"
    docs = backend.context.activities
    for text, code, count in ((good + "not json\n", ExitCode.USAGE, 0), (good, 0, 7)):
        path.write_text(text)
        args = ("--from", str(path)) if source == "file" else ("--from", "-")
        result = run_cli("enqueue", *args, "--strict", "--batch-size", "3",
                         input=text if source == "stdin" else None)
        assert result.code == code, result
        assert docs.count_documents({}) == count
    assert result.stdout == "enqueued 7 of 7 lines\n"
    assert sorted(d["payload"]["n"] for d in docs.find()) == list(range(7))
    assert not list(Path(tmp_path).glob("runnerq-enqueue-*"))


def test_strict_from_stdin_with_skip_lines_numbers_lines_as_the_input(
        backend: RunnerQ, run_cli: Any) -> None:
    text = "not json\n" + _lines(0, 4)  # line 1 is skipped, lines 2-5 written
    result = run_cli("enqueue", "--from", "-", "--strict", "--skip-lines", "1",
                     "--batch-size", "3", "-o", "json", input=text)
    assert result.code == 0, result
    summary = json.loads(result.stdout)
    assert [a["line"] for a in summary["activities"]] == [2, 3, 4, 5]
    assert (summary["lines"], summary["last_line"]) == (4, 5)
    docs = backend.context.activities
    assert sorted(d["payload"]["n"] for d in docs.find()) == [0, 1, 2, 3]


@pytest.mark.slow
@pytest.mark.proof
def test_a_server_outage_midway_prints_the_summary_so_far_and_exits_6(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    from pymongo import MongoClient

    from tests.test_server_outage import free_port, start_server, stop

    port = free_port()
    uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    env = {**cli_env, "RUNNERQ_MONGO_URI": uri, "RUNNERQ_DATABASE": "outage_enqueue",
           "RUNNERQ_SERVER_SELECTION_TIMEOUT": "2s"}
    server = start_server(env, port, tmp_path / "server.sqlite")
    proc = None
    try:
        subprocess.run([sys.executable, "-m", "runnerq_cli", "init-indexes"], env=env,
                       check=True, capture_output=True, timeout=60)
        proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "enqueue", "--from", "-",
                                 "--batch-size", "5"], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdin is not None
        proc.stdin.write(_lines(0, 10))  # two batches
        proc.stdin.flush()
        with MongoClient(uri, uuidRepresentation="standard") as client:
            acts = client.outage_enqueue.runnerq_tests_activities
            wait_until(lambda: acts.count_documents({}) == 10, timeout=60,
                       message="the first two batches")
        stop(server)
        out, err = proc.communicate(_lines(10, 20), timeout=120)  # the next batch meets it
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if server.poll() is None:
            stop(server)
    assert proc.returncode == ExitCode.UNAVAILABLE, err
    assert out.startswith("enqueued 10 of "), out
    assert err.startswith("error: stopped at line 11: ") and "Traceback" not in err, err
    assert len(err.splitlines()) == 1


def _read_until(stream: Any, wanted: str, timeout: float = 30.0) -> str:
    """What the pipe has given once `wanted` is in it (partial lines too)."""
    import os
    import select
    import time

    got = b""
    deadline = time.monotonic() + timeout
    while wanted.encode() not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"{wanted!r} not printed in {timeout} s: {got[-500:]!r}"
        ready, _, _ = select.select([stream], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(stream.fileno(), 65536)
            assert chunk, f"the output ended before {wanted!r}: {got[-500:]!r}"
            got += chunk
    return got.decode()


@pytest.mark.parametrize("output", ["json", "jsonl"])
def test_machine_output_streams_each_activity_as_it_is_written(
        backend: RunnerQ, cli_env: dict[str, str], output: str) -> None:
    """-o json and -o jsonl print each batch's activities while the input is still open
    (nothing kept per line: memory does not grow with the input), and the whole output
    is one valid JSON document, or one object per line, with the rejected lines."""
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "enqueue", "--from", "-",
                             "--batch-size", "2", "-o", output], env=cli_env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=default_signals)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write((_lines(0, 2) + "not json\n").encode())
        proc.stdin.flush()
        # The first batch is out before the input ends.
        space = " " if output == "json" else ""  # -o jsonl is compact
        early = _read_until(proc.stdout, f'"line":{space}2')
        assert f'"line":{space}1' in early
        proc.stdin.write(_lines(3, 5).encode())
        proc.stdin.close()
        proc.wait(timeout=60)
        rest = proc.stdout.read().decode()
        err = proc.stderr.read().decode() if proc.stderr else ""
    finally:
        proc.kill()
    text = early + rest
    assert proc.returncode == int(ExitCode.USAGE), err  # one invalid line
    if output == "json":
        summary = json.loads(text)
        assert [a["line"] for a in summary["activities"]] == [1, 2, 4, 5]
        assert (summary["lines"], summary["enqueued"], summary["invalid"]) == (5, 4, 1)
        assert [r["line"] for r in summary["rejected"]] == [3]
    else:
        records = [json.loads(line) for line in text.splitlines()]
        assert sorted(r["line"] for r in records) == [1, 2, 3, 4, 5]
        assert [r["kind"] for r in records if "kind" in r] == ["invalid"]
        assert all(r["status"] == "pending" for r in records if "id" in r)
    assert backend.context.activities.count_documents({}) == 4


def test_rejected_lines_past_the_listed_number_are_counted_not_kept(
        backend: RunnerQ, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of mostly bad lines does not grow memory: the reports list the first
    REJECTED_LISTED rejected lines and count the rest; the counts and the exit code are
    those of every line, and -o jsonl still lists every one."""
    from runnerq_cli.backend.queue import intake

    monkeypatch.setattr(intake, "REJECTED_LISTED", 3)
    text = "".join(["not json\n"] * 5) + _lines(0, 1)
    res = run_cli("enqueue", "--from", "-", input=text)
    assert res.code == int(ExitCode.USAGE), res
    lines = res.stdout.splitlines()
    assert lines[0].startswith("enqueued 1 of 6 lines; 5 invalid"), lines
    assert [ln.split(":")[0] for ln in lines[1:4]] == ["line 1", "line 2", "line 3"]
    assert lines[4] == ("... and 2 more rejected lines, not listed (-o jsonl lists every "
                        "one)"), lines
    assert "5 of 6 lines rejected" in res.stderr
    summary = json.loads(run_cli("enqueue", "--from", "-", "-o", "json", input=text).stdout)
    assert (summary["invalid"], len(summary["rejected"]), summary["rejected_not_listed"]) == (
        5, 3, 2)
    every = run_cli("enqueue", "--from", "-", "-o", "jsonl", input=text).stdout.splitlines()
    assert sum(1 for line in every if json.loads(line).get("kind") == "invalid") == 5
    quiet = run_cli("enqueue", "--from", "-", "-q", input=text)
    assert quiet.stderr.count("invalid") == 3 and "2 more rejected lines" in quiet.stderr

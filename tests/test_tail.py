"""`runnerq-mongo tail events`: output, filters, --since, --resume, --cursor-file, following."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import timedelta

from runnerq_cli.cli.eventfmt import EVENT_FIELDS
from tests.waiting import LineReader, wait_until


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def cursor_of(stderr: str) -> str:
    return next(line.split(": ", 1)[1] for line in stderr.splitlines()
                if line.startswith("cursor: "))


def run_one(queue, clock, kind="a"):
    aid = queue.enqueue(kind, {"n": 1}).activity_id
    clock.advance(0.01)
    [claim] = queue.dequeue("w1", types=[kind])
    clock.advance(0.01)
    queue.ack_success(claim, {"ok": 1})
    clock.advance(0.01)
    return aid


def test_no_follow_jsonl_fields_and_order(queue, clock, run_cli):
    aid = run_one(queue, clock)
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl")
    assert res.code == 0, res.stderr
    rows = jsonl(res.stdout)
    assert [r["event_type"] for r in rows] == ["Enqueued", "Dequeued", "Started", "Completed",
                                               "ResultStored"]
    assert all(tuple(r) == EVENT_FIELDS for r in rows)
    assert all(r["activity_id"] == str(aid) and r["activity_type"] == "a" for r in rows)
    assert rows[1]["worker_id"] == "w1"
    assert rows[3]["timestamp"].endswith("Z")
    assert cursor_of(res.stderr)


def test_json_is_one_array_and_jsonl_one_line_per_event(queue, clock, run_cli, tmp_path):
    """-o json: one JSON array when the tail stops; -o jsonl: a line per event (issue 11)."""
    run_one(queue, clock)
    lines = run_cli("tail", "events", "--no-follow", "-o", "jsonl").stdout
    cursor_file = tmp_path / "cursor"
    res = run_cli("tail", "events", "--no-follow", "-o", "json",
                  "--cursor-file", str(cursor_file))
    assert res.code == 0, res.stderr
    assert len(res.stdout.strip().splitlines()) == 1  # one document, not one per event
    assert json.loads(res.stdout) == jsonl(lines)
    assert cursor_file.read_text().strip() == cursor_of(res.stderr)
    empty = run_cli("tail", "events", "--no-follow", "-o", "json", "--resume",
                    cursor_of(res.stderr))
    assert json.loads(empty.stdout) == []


def test_text_output_honours_no_color(queue, clock, run_cli):
    run_one(queue, clock)
    res = run_cli("tail", "events", "--no-follow")
    assert res.code == 0
    assert "Completed" in res.stdout and "\x1b[" not in res.stdout


def test_filters(queue, clock, run_cli):
    a = run_one(queue, clock, "a")
    run_one(queue, clock, "b")
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl", "--event", "Completed,Enqueued",
                  "--type", "b")
    assert [(r["activity_type"], r["event_type"]) for r in jsonl(res.stdout)] == [
        ("b", "Enqueued"), ("b", "Completed")]
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl", "--activity", str(a),
                  "--worker", "w1")
    assert {r["activity_id"] for r in jsonl(res.stdout)} == {str(a)}
    assert [r["event_type"] for r in jsonl(res.stdout)] == ["Dequeued", "Started", "Completed",
                                                            "ResultStored"]


def test_resume_cursor_and_cursor_file(queue, clock, run_cli, tmp_path):
    run_one(queue, clock)
    first = run_cli("tail", "events", "--no-follow", "-o", "jsonl")
    cursor = cursor_of(first.stderr)
    # Written while no tail was running.
    second_id = run_one(queue, clock)
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl", "--resume", cursor)
    rows = jsonl(res.stdout)
    assert len(rows) == 5 and {r["activity_id"] for r in rows} == {str(second_id)}
    ids_first = {r["id"] for r in jsonl(first.stdout)}
    assert ids_first.isdisjoint({r["id"] for r in rows})

    path = tmp_path / "tail.cursor"
    full = run_cli("tail", "events", "--no-follow", "-o", "jsonl", "--cursor-file", str(path))
    assert len(jsonl(full.stdout)) == 10 and path.exists()
    third_id = run_one(queue, clock)
    again = run_cli("tail", "events", "--no-follow", "-o", "jsonl", "--cursor-file", str(path))
    assert {r["activity_id"] for r in jsonl(again.stdout)} == {str(third_id)}
    assert jsonl(run_cli("tail", "events", "--no-follow", "-o", "jsonl", "--cursor-file",
                         str(path)).stdout) == []


def test_since(queue, clock, run_cli):
    queue.enqueue("old", {})
    clock.advance(120)
    queue.enqueue("new", {})
    since = (clock() - timedelta(seconds=60)).isoformat()
    res = run_cli("tail", "events", "--no-follow", "-o", "jsonl", "--since", since)
    assert [r["activity_type"] for r in jsonl(res.stdout)] == ["new"]
    assert run_cli("tail", "events", "--since", "10m", "--resume", "x").code == 2


def test_bad_inputs(run_cli, server):
    assert run_cli("tail", "events", "--resume", "nonsense", "--no-follow").code == 2
    assert run_cli("tail", "events", "--mode", "sideways", "--no-follow").code == 2
    if server.kind == "mongoeco":
        res = run_cli("tail", "events", "--mode", "change-stream", "--max-events", "1")
        assert res.code == 2 and "change streams" in res.stderr


def probe_shown(queue, lines: LineReader) -> bool:
    """Enqueue a probe activity; True once the tail has printed a line (any probe's)."""
    queue.enqueue("probe", {})
    try:
        lines.readline(timeout=0.5)
    except AssertionError:
        return False
    return True


def test_follow_then_resume_after_sigint(queue, clock, cli_env):
    """A real process follows new events, leaves cleanly on SIGINT with its cursor;
    events written while it was stopped come on resume, none repeated."""
    proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", "tail", "events", "-o", "jsonl",
                             "--poll-interval", "0.1"], env=cli_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = LineReader(proc.stdout)
        # Following from the end: once one of these probes shows up, the tail is live.
        wait_until(lambda: probe_shown(queue, lines), timeout=60, message="the tail to follow")
        aid = queue.enqueue("live", {}).activity_id
        line = lines.wait_for(lambda text: json.loads(text)["activity_type"] == "live")
        assert json.loads(line)["activity_id"] == str(aid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        err = proc.stderr.read()  # a few lines: cannot have filled the pipe
        out = lines.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    # Nothing after `live` but, on a loaded machine, a late probe of the start-up loop
    # (several may be enqueued before the first one is seen)
    assert all(r["activity_type"] == "probe" for r in jsonl(out)), out
    cursor = cursor_of(err)
    later = queue.enqueue("later", {}).activity_id
    res = subprocess.run([sys.executable, "-m", "runnerq_cli", "tail", "events", "-o", "jsonl",
                          "--no-follow", "--resume", cursor], env=cli_env, capture_output=True,
                         text=True, timeout=60)
    assert [r["activity_id"] for r in jsonl(res.stdout)] == [str(later)]

"""Lines and tables that fit (issue 25, point 8), on a real terminal of 80 and 60 columns."""

from __future__ import annotations

import pytest

from tests.terminal import on_terminal

ERROR = ("POST https://payments.example.com/v2/charges failed: 502 Bad Gateway from the "
         "upstream after 3 retries")


@pytest.mark.parametrize("columns", [80, 60])
def test_tail_keeps_a_dead_letter_error_cut_to_fit(queue, cli_env, columns) -> None:
    queue.enqueue("charge_customer_card", {}, max_retries=1)
    claim = queue.dequeue("worker-host-abcdef-1234abcd")[0]
    queue.ack_failure(claim, ERROR, retryable=True)
    code, shown = on_terminal(cli_env, "tail", "events", "--no-follow", columns=columns)
    assert code == 0, shown
    [line] = [ln for ln in shown.splitlines() if "DeadLetter" in ln]
    assert len(line) <= columns, line
    assert line.endswith("…") and "DeadLetter" in line, line
    assert ("error=POST https://pay" if columns == 80 else "error=POST") in line, line


def test_doctor_on_a_terminal_colours_fail_red_and_agrees_on_pending(queue, cli_env) -> None:
    queue.enqueue("job", {})
    env = {k: v for k, v in cli_env.items() if k != "NO_COLOR"}
    import subprocess
    import sys

    from tests.terminal import ANSI

    _code, raw = on_terminal(env, "doctor", columns=80, raw=True)
    assert "\x1b[33mwarn" in raw or "\x1b[31m\x1b[1mFAIL" in raw or "\x1b[1;31mFAIL" in raw \
        or "\x1b[31mFAIL" in raw, raw  # coloured by what it means
    lines = ANSI.sub("", raw).splitlines()
    backlog = next(ln for ln in lines if "backlog" in ln)
    workers = next(ln for ln in lines if ln.split()[1:2] == ["workers:"])
    assert "oldest pending activity waits" in backlog
    assert "no pending work" not in workers  # one snapshot: pending work is there
    raw = subprocess.run([sys.executable, "-m", "runnerq_cli", "doctor"], env=env,
                         capture_output=True, text=True)
    assert "\x1b[" not in raw.stdout  # off a terminal: no colour


def test_init_indexes_says_one_line_when_everything_is_there(queue, run_cli) -> None:
    queue.maintenance.init_indexes()
    res = run_cli("init-indexes")
    assert res.code == 0 and len(res.stdout.splitlines()) == 1
    assert res.stdout.rstrip().endswith(" present")


@pytest.mark.parametrize("columns", [60, 80])
def test_show_event_lines_fit_like_tail(queue, cli_env, columns) -> None:
    queue.enqueue("charge_customer_card", {}, max_retries=1)
    claim = queue.dequeue("worker-host-abcdef-1234abcd")[0]
    queue.ack_failure(claim, ERROR, retryable=True)
    code, shown = on_terminal(cli_env, "show", str(claim.activity.id), columns=columns)
    assert code == 0, shown
    events = shown.split("events", 1)[1].splitlines()[1:]
    assert [ln for ln in events if "DeadLetter" in ln], shown
    assert all(len(ln) <= columns for ln in events), shown


@pytest.mark.parametrize("columns", [60, 80])
def test_queues_fits_and_keeps_what_matters(queue, cli_env, columns) -> None:
    queue.enqueue("job", {})
    code, shown = on_terminal(cli_env, "queues", columns=columns)
    assert code == 0, shown
    lines = [ln for ln in shown.splitlines() if ln.strip()]
    assert all(len(ln) <= columns for ln in lines), shown
    for header in ("queue", "pending", "running", "failed", "dead-letter", "paused"):
        assert header in lines[0], shown
    assert len(lines) == 2, shown  # the header and the queue: no footnote for a column not shown


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_list_gives_the_error_the_room_left_on_the_line(queue, run_cli, columns) -> None:
    """The other columns are fitted first (the least useful left out), then the error
    takes what is left and is cut where it ends: its start says what happened."""
    queue.enqueue("charge_customer_card", {})
    claim = queue.dequeue("w")[0]
    queue.ack_failure(claim, ERROR, retryable=False)
    res = run_cli("list", "failed", env={"COLUMNS": str(columns)})
    assert res.code == 0, res.stderr
    header, row = res.stdout.splitlines()
    assert len(row) == columns and row.endswith("…"), row  # the error fills the line
    error = row[header.index("last error"):]
    assert ERROR.startswith(error[:-1]) and len(error) >= 20, error
    assert "charge_customer_card" in row and str(claim.activity_id)[:8] in row
    assert ("finished" in header) == (columns >= 80), header  # the time goes below 80


def test_dry_run_samples_and_full_ids_fit_60_columns(queue, run_cli) -> None:
    """The sample is a table like `list` (ids as prefixes, the error given the room
    left); lines with a full id wrap between words, the id whole."""
    for _ in range(2):
        queue.enqueue("charge_customer_card", {})
        queue.ack_failure(queue.dequeue("w")[0], ERROR, retryable=False)
    pending = str(queue.enqueue("charge_customer_card", {}).activity_id)
    failed = [str(a.id) for a in queue.inspector.list_page("failed").items]
    narrow = {"COLUMNS": "60"}
    runs = [run_cli("retry", "--status", "failed", "--dry-run", env=narrow),
            run_cli("cancel", pending, failed[0], "--dry-run", env=narrow),
            run_cli("set-priority", "--status", "pending", "--max", "5", "--yes", "high",
                    env=narrow),
            run_cli("cancel", failed[1], pending, env=narrow),
            run_cli("explain", failed[0], env=narrow),
            run_cli("enqueue", "charge_customer_card", "--idempotency-key", "k", env=narrow),
            run_cli("enqueue", "charge_customer_card", "--idempotency-key", "k", env=narrow)]
    for res in runs:
        lines = res.stdout.splitlines()
        assert lines and all(len(line) <= 60 for line in lines), res.stdout
    lines = runs[0].stdout.splitlines()
    sample = lines[lines.index("sample (2 of 2):") + 1:]
    assert sample[0].split()[:3] == ["id", "type", "age"], sample  # status: the filter's
    assert {line.split()[0] for line in sample[1:]} == {f[:8] for f in failed}, sample
    assert all(line.endswith("…") and "POST https://pay" in line for line in sample[1:])
    held = runs[5].stdout.split()[1]
    for res, ids in ((runs[1], [pending, failed[0]]), (runs[2], [pending]),
                     (runs[3], [pending]), (runs[4], [failed[0]]), (runs[6], [held])):
        shown = res.stdout.split()
        assert all(i in shown or f"{i}:" in shown for i in ids), res.stdout  # whole

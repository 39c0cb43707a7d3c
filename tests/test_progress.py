"""Progress that shows progress (issue 25, point 7): count, rate and time left, on a
terminal, redrawn while the work runs; nothing on a pipe."""

from __future__ import annotations

import re
from collections.abc import Iterator

from runnerq_cli.cli.progress import progress_text
from tests.bulk_fixtures import insert_activities
from tests.terminal import on_terminal


def test_progress_text() -> None:
    assert progress_text(8700, 20_000, 458.0, "lines") == "8,700 / 20,000 lines  19/s  " \
                                                          "9m55s left"
    assert progress_text(8700, None, 458.0, "lines") == "8,700 lines  19/s"
    assert progress_text(0, 10, 0.0, "activities") == "0 / 10 activities  0.0/s"


def test_a_bulk_action_on_a_terminal_shows_count_rate_and_time_left(backend, cli_env) -> None:
    """(tests/test_bulk_batches.py checks the bar stays off standard output.)"""
    from tests.stalling_proxy import StallingProxy

    insert_activities(backend.context, 50, "pending")
    # Each batch's write a little late: the run outlasts the progress line's delay
    # however fast the server is (it did not, once the batches got cheaper).
    proxy = StallingProxy(cli_env["RUNNERQ_MONGO_URI"], set(), {"update"}, 0.1)
    try:
        code, shown = on_terminal(
            {**cli_env, "COLUMNS": "100",
             "RUNNERQ_MONGO_URI": proxy.uri(cli_env["RUNNERQ_MONGO_URI"])},
            "cancel", "--status", "pending", "--max", "100", "--yes", "--batch-size", "2",
            columns=100)
    finally:
        proxy.close()
    assert code == 0, shown
    assert re.findall(r"(\d+) / 50 activities\s+[\d.,]+/s\s+(\S+) left", shown), shown[-500:]
    assert "cancel: matched 50" in shown


def test_progress_text_with_the_share_of_the_input_done() -> None:
    assert progress_text(8700, None, 30.0, "lines", 0.43) == "8,700 lines  43%  290/s  40s left"
    assert progress_text(20, None, 2.0, "lines", 1.0) == "20 lines  100%  10/s"
    assert progress_text(20, None, 2.0, "lines", None, no_total=True) == \
        "20 lines  10/s  (no total: a stream)"


def _lines(count: int) -> bytes:
    return b"".join(b'{"type": "job", "payload": {"n": %d}}\n' % n for n in range(count))


def test_enqueue_from_a_file_shows_the_share_read_and_time_left(cli_env, tmp_path) -> None:
    """The loop does not know how many lines are to come; the file's size does: the
    line counts the lines and gives the share of the bytes read, and the time left."""
    from tests.stalling_proxy import StallingProxy

    path = tmp_path / "jobs.ndjson"
    path.write_bytes(_lines(40))
    # Each batch's write a little late: the run outlasts the progress line's delay
    # however fast the server is.
    proxy = StallingProxy(cli_env["RUNNERQ_MONGO_URI"], set(), {"insert", "update"}, 0.2)
    try:
        code, shown = on_terminal({**cli_env, "RUNNERQ_MONGO_URI": proxy.uri(
            cli_env["RUNNERQ_MONGO_URI"])}, "enqueue", "--from", str(path), "--batch-size",
            "4", columns=80)
    finally:
        proxy.close()
    assert code == 0 and "enqueued 40 of 40 lines" in shown, shown[-500:]
    seen = re.findall(r"(\d+) lines\s+(\d+)%\s+[\d.,]+/s\s+\S+ left", shown)
    assert seen and all(0 < int(pct) < 100 for _, pct in seen), shown[-800:]


def test_enqueue_from_a_pipe_shows_count_and_rate_and_says_no_total(backend,
                                                                    cli_env) -> None:
    """The producer pauses past the progress line's delay once its first lines are
    written: the line shows however fast the server writes."""
    import time

    from runnerq_cli.cli.progress import DELAY
    from tests.waiting import wait_until

    def producer() -> Iterator[bytes]:
        yield _lines(20)
        wait_until(lambda: backend.context.activities.count_documents({}) == 20)
        time.sleep(DELAY)  # a producer's pause (the progress line waits DELAY to show)
        yield _lines(20)

    code, shown = on_terminal(cli_env, "enqueue", "--from", "-", "--batch-size", "4",
                              columns=80, piped=producer())
    assert code == 0 and "enqueued 40 of 40 lines" in shown, shown[-500:]
    assert re.findall(r"\d+ lines\s+[\d.,]+/s\s+\(no total: a stream\)", shown), shown[-800:]
    assert not re.findall(r"\d+%|left", shown), shown[-800:]

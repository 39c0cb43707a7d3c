"""`stats --watch` on a real terminal (issue 25, points 2 and 3), through tmux at 60, 80
and 120 columns: the totals, workers and pause stay on screen and the per-type rows give
way first; `q` quits with exit 0."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import uuid

import pytest

from tests.helpers import drive_to
from tests.waiting import wait_until

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
TYPES = [f"type_{n:02d}" for n in range(12)]


@pytest.fixture
def busy(queue, clock):
    for name in TYPES:
        drive_to(queue, "completed", name, clock=clock)
        drive_to(queue, "failed", name, clock=clock, error="boom")
    queue.enqueue("waiting", {})
    queue.registry.register_worker("w1", types=TYPES, concurrency=2)
    return queue


def _watch(cli_env, tmp_path, columns: int, rows: int) -> tuple[str, int]:
    """The screen once the view is drawn, then `q`: (screen, exit code)."""
    assert TMUX is not None
    env = {k: v for k, v in cli_env.items() if k not in ("COLUMNS", "LINES")}
    rc = tmp_path / f"rc{columns}"
    script = tmp_path / f"watch{columns}.sh"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script.write_text("unset COLUMNS LINES\n" + exports
                      + f"{shlex.quote(__import__('sys').executable)} -m runnerq_cli stats "
                      f"--watch --interval 0.5; echo $? > {shlex.quote(str(rc))}\n")
    server = f"rq-{uuid.uuid4().hex[:8]}"
    tmux = [TMUX, "-L", server, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-s", "w", "-x", str(columns), "-y", str(rows),
                    f"sh {shlex.quote(str(script))}"], check=True)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p", "-t", "w"],
                                  capture_output=True, text=True).stdout

        wait_until(lambda: "paused" in screen() and "workers" in screen(), timeout=60,
                   interval=0.2, message="the first view")
        first = screen().splitlines()[0]
        # A later refresh: the terminal's size is the pane's by then (tmux sizes a
        # detached session just after starting its command).
        wait_until(lambda: screen().splitlines()[:1] != [first], timeout=30, interval=0.2,
                   message=f"a second refresh after {first!r}: {screen()}")
        shown = screen()
        subprocess.run([*tmux, "send-keys", "-t", "w", "q"], check=True)
        wait_until(rc.exists, timeout=30, interval=0.1, message="stats --watch to quit on q")
        return shown, int(rc.read_text())
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


@pytest.mark.parametrize(("columns", "rows"), [(60, 24), (80, 24), (120, 50)])
def test_watch_keeps_what_matters_on_screen_and_q_quits(busy, cli_env, tmp_path,
                                                         columns, rows) -> None:
    shown, code = _watch(cli_env, tmp_path, columns, rows)
    assert code == 0
    lines = shown.rstrip("\n").splitlines()
    assert len(lines) <= rows and all(len(line) <= columns for line in lines)
    for needed in ("total", "oldest pending", "throughput", "workers", "paused"):
        assert any(line.startswith(needed) for line in lines), (needed, shown)
    assert not any(line.strip() == "..." for line in lines), shown
    if rows == 24:  # 12 types do not fit: they give way, and say so
        assert "more types" in shown or "per-type rows" in shown, shown
    else:
        assert all(name in shown for name in TYPES), shown


def test_colours_mean_good_or_bad(queue, clock) -> None:
    """A rising dead-letter count is red, a falling processing count plain, failed 0 not
    red, more completed green (the Δ column of --watch)."""
    import io
    import re

    from rich.console import Console

    from runnerq_cli.cli.commands.stats import render

    queue.enqueue("a", {})
    queue.enqueue("b", {}, max_retries=1)
    claims = queue.dequeue("w", limit=2)
    before = queue.inspector.stats_snapshot()
    queue.ack_success(claims[0], None)
    queue.ack_failure(claims[1], "boom")
    after = queue.inspector.stats_snapshot()
    screen = io.StringIO()
    Console(file=screen, force_terminal=True, color_system="standard", width=100).print(
        render(after, before))
    rows = {re.sub(r"\x1b\[[0-9;]*m", "", line).split()[0]: line
            for line in screen.getvalue().splitlines() if line.strip()}
    assert "\x1b[31m+1" in rows["dead-letter"]  # red: bad news
    assert "\x1b[32m+1" in rows["completed"]  # green: good news
    assert "-2" in rows["processing"] and "\x1b[31m-2" not in rows["processing"] \
        and "\x1b[32m-2" not in rows["processing"]  # neither: plain
    assert "\x1b[31m" not in rows["failed"]  # failed 0: not red

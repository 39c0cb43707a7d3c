"""The soak of issue 18, as a proof: batches through `enqueue --from` (succeeding, doomed,
failing and slow activities), two workers (one whose clock runs 10 s behind, where
faketime is installed), and a live `tail events -o jsonl` never killed. At the end the
live tail is compared with the full history (`tail events --no-follow`): missing 0 and
repeated 0, printed as figures (docs/robustness.md).

The default run is a short form; `RUNNERQ_CHAOS=full` adds the long one. Every wait is
bounded; every process started here is killed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.chaos_support import (
    ROOT,
    TailProcess,
    faketime_prefix,
    history_when_printed,
    tail_account,
    wait_for,
)

# A long proof of our own logic (pyproject.toml, "proof"): the oldest-versions run
# of .ci/run leaves it out.
pytestmark = pytest.mark.proof

FULL = os.environ.get("RUNNERQ_CHAOS") == "full"
TERMINAL = ("completed", "failed", "dead_letter")


def _batch(n: int, size: int) -> str:
    """A mix like the soak's: most succeed, some are doomed (retried, then dead-lettered),
    some fail for good, some are slow."""
    lines = []
    for i in range(size):
        kind = ("echo", "echo", "echo", "boom", "fatal", "sleep")[(n * size + i) % 6]
        line: dict = {"type": kind, "payload": {"batch": n, "i": i}}
        if kind == "boom":
            line.update(max_retries=3, retry_delay="0s")
        if kind == "sleep":
            line["payload"]["seconds"] = 0.2
        lines.append(json.dumps(line))
    return "\n".join(lines) + "\n"


def run_soak(backend, env: dict[str, str], tmp_path: Path, *, batches: int, size: int,
             deadline: float) -> tuple[int, int, int, int]:
    """(history, printed, missing, repeated) of one soak; prints its figures."""
    started = time.monotonic()
    skew = faketime_prefix("-10s")
    procs: list[subprocess.Popen] = []
    tail = TailProcess(env, "--cursor-file", str(tmp_path / "live.cursor"),
                       "--poll-interval", "0.2")
    try:
        wait_for((tmp_path / "live.cursor").exists, timeout=30, what="the tail positioned")
        for name, prefix in (("soak-skewed", skew), ("soak-normal", [])):
            procs.append(subprocess.Popen(
                [*prefix, sys.executable, "-m", "runnerq_cli", "worker", "--app",
                 "tests.worker_handlers", "--worker-id", name, "-n", "4",
                 "--poll-interval", "0.2", "--log-format", "plain"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True))  # a group of its own: killpg stops it whole
        for n in range(batches):
            source = tmp_path / f"batch{n}.jsonl"
            source.write_text(_batch(n, size))
            prefix = skew if n % 2 else []  # every other batch from the skewed host
            proc = subprocess.run(
                [*prefix, sys.executable, "-m", "runnerq_cli", "enqueue", "--from",
                 str(source), "-q"], cwd=ROOT, env=env, capture_output=True, text=True,
                timeout=120)
            assert proc.returncode == 0, proc.stderr
        total = batches * size
        acts = backend.context.activities
        wait_for(lambda: acts.count_documents({"status": {"$in": list(TERMINAL)}}) == total,
                 timeout=max(1.0, deadline - (time.monotonic() - started)),
                 what="every activity finished", every=0.5)
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)  # the worker drains
        for proc in procs:
            proc.wait(60)
            wait_for(lambda pid=proc.pid: not _group_alive(pid), timeout=60,
                     what="the workers to drain and exit")
        # nothing may wait in a buffer of a worker (none should)
        backend.maintenance.repair_outboxes(0)
        history = history_when_printed(env, tail.ids)
        missing, repeated = tail_account(tail.ids(), [row["id"] for row in history])
        print(f"soak: {total} activities in {batches} batches (enqueue --from), 2 workers "
              f"({'one 10 s behind' if skew else 'faketime absent: same clock'}): history "
              f"{len(history)} events, live tail printed {tail.count}, missing {missing}, "
              f"repeated {repeated}, {time.monotonic() - started:.1f}s")
        return len(history), tail.count, missing, repeated
    finally:
        for proc in procs:
            if _group_alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        tail.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_soak_short_live_tail_equals_the_history(backend, cli_env, tmp_path):
    history, printed, missing, repeated = run_soak(backend, cli_env, tmp_path, batches=4,
                                                   size=30, deadline=240)
    assert history > 4 * 30 and printed == history
    assert (missing, repeated) == (0, 0)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="long form: set RUNNERQ_CHAOS=full")
@pytest.mark.timeout(1200)
def test_soak_full_live_tail_equals_the_history(backend, cli_env, tmp_path):
    history, printed, missing, repeated = run_soak(backend, cli_env, tmp_path, batches=12,
                                                   size=40, deadline=900)
    assert printed == history and (missing, repeated) == (0, 0)

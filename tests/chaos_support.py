"""Helpers of the proof suite (tests/test_chaos*.py): processes a test can kill and read.

Every wait is bounded by a deadline; every process started here is killed by
the fixture that started it, whatever the test's outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers import default_signals

ROOT = Path(__file__).resolve().parent.parent


def wait_for(predicate, timeout: float = 30, what: str = "condition", every: float = 0.02):
    """Poll `predicate` until it is truthy (and return its value), or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie has finished running)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


class TailProcess:
    """`runnerq-mongo tail events -o jsonl ...` whose lines are read as they come,
    each stamped with the monotonic time it arrived (to measure repeats after a kill)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_cli", "tail", "events", "-o", "jsonl", *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=default_signals)  # the tests stop it with SIGINT
        self.lines: list[tuple[float, dict]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stderr = ""

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                with self._lock:
                    self.lines.append((time.monotonic(), json.loads(line)))

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.lines)

    def ids(self) -> list[str]:
        with self._lock:
            return [row["id"] for _, row in self.lines]

    def last_arrival(self) -> float:
        with self._lock:
            return self.lines[-1][0] if self.lines else 0.0

    def kill(self) -> float:
        """SIGKILL; returns the monotonic time of the kill."""
        at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.finish(10)
        return at

    def finish(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def tail_no_follow(env: dict[str, str], *args: str, timeout: float = 60) -> list[dict]:
    """What a fresh `tail events --no-follow -o jsonl ARGS` prints (exit 0 asserted)."""
    proc = subprocess.run([sys.executable, "-m", "runnerq_cli", "tail", "events", "--no-follow",
                           "-o", "jsonl", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def repeats_within(first: TailProcess, killed_at: float, resumed: list[dict]) -> list[float]:
    """How long before the kill each event printed again on resume had first arrived."""
    arrived = {row["id"]: at for at, row in first.lines}
    return [killed_at - arrived[row["id"]] for row in resumed if row["id"] in arrived]


class LaggingClock:
    """A backend clock that says a time `lag` seconds old: a writer that chose its time and
    then stalled that long before its write landed (or a host whose clock runs behind).
    `server_stamps` keeps the server stamping positions and every time it writes, as on
    the default clock (servertime.server_stamps): only its comparisons use this clock."""

    server_stamps = True

    def __init__(self, lag: float) -> None:
        self.lag = lag

    def __call__(self):
        from datetime import timedelta

        from runnerq_cli.backend.store.context import utc_now

        return utc_now() - timedelta(seconds=self.lag)


def faketime_prefix(offset: str) -> list[str]:
    """A command prefix running its command with the clock OFFSET away (libfaketime from
    Debian's faketime package) where installed, else [] (the caller skips).

    The library is preloaded directly, not through the `faketime` wrapper: the wrapper
    creates a semaphore and a shared-memory segment named by its pid, which a killed
    process leaves in /dev/shm, and a later wrapper given the same pid failed with
    "faketime: sem_open: File exists" (seen in CI). Without the wrapper libfaketime keeps
    no shared state, and the command is the process itself (no wrapper to kill)."""
    import glob

    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return ["env", f"LD_PRELOAD={found[0]}", f"FAKETIME={offset}"] if found else []


def tail_account(live: list[str], history: list[str]) -> tuple[int, int]:
    """(missing, repeated): events of the full history the live tail did not print, and
    lines it printed more than once (or that are not in the history)."""
    from collections import Counter

    printed, wanted = Counter(live), Counter(history)
    missing = sum((wanted - printed).values())
    repeated = sum((printed - wanted).values())
    return missing, repeated


def history_when_printed(env: dict[str, str], printed, timeout: float = 120,
                         quiet: float = 2.0) -> list[dict]:
    """The full history (`tail events --no-follow`), once the live tail(s) printed as many
    lines as it holds. `printed()` gives what they printed; the history is read only when
    that stopped growing for `quiet` seconds (reading it is heavy on a loaded server)."""
    deadline = time.monotonic() + timeout
    while True:
        seen, changed = len(printed()), time.monotonic()
        while time.monotonic() - changed < quiet:
            assert time.monotonic() < deadline, "the live tail did not catch up in time"
            time.sleep(0.1)
            if len(printed()) != seen:
                seen, changed = len(printed()), time.monotonic()
        history = tail_no_follow(env)
        if seen >= len(history) > 0:
            return history
        assert time.monotonic() < deadline, (
            f"the live tail printed {seen} of {len(history)} events")

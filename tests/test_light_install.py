"""A light install to try it (issue 25, point 12): an extra with only what the dev
server needs, used by the README's quick start; `dev-server &` does not tell a
background job to press Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


def test_the_dev_server_extra_is_only_the_dev_server() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert [req.split(">")[0] for req in extras["dev-server"]] == ["mongoeco"]
    assert "pip install -e '.[dev-server]'" in (ROOT / "README.md").read_text()


@pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("bash") is None,
                    reason="needs tmux and bash")
def test_dev_server_in_the_background_says_how_to_stop_it(tmp_path) -> None:
    pytest.importorskip("mongoeco")
    tmux = [str(shutil.which("tmux")), "-L", f"rq-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    pid_file = tmp_path / "server.pid"  # the server is killed at the end (tmux leaves it)
    command = (f"{shlex.quote(sys.executable)} -m runnerq_cli dev-server --port 0 & "
               f"echo $! > {shlex.quote(str(pid_file))}; sleep 30")
    script = tmp_path / "bg.sh"
    script.write_text(f"cd {shlex.quote(str(ROOT))}\n"
                      f"export PYTHONPATH={shlex.quote(str(ROOT))}\n"
                      f"{command}\n")
    subprocess.run([*tmux, "new-session", "-d", "-s", "w", "-x", "120", "-y", "30",
                    f"bash --norc --noprofile -i {shlex.quote(str(script))}"], check=True)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p", "-t", "w"],
                                  capture_output=True, text=True).stdout

        wait_until(lambda: "Not for production" in screen(), timeout=60, interval=0.2,
                   message="the dev server's last line")
        shown = screen()
        assert "Press Ctrl-C" not in shown, shown
        assert "Running in the background: stop it with `kill " in shown, shown
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)

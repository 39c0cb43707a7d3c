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


NEEDS_TMUX = pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("bash") is None,
                                reason="needs tmux and bash")


def _in_the_background(tmp_path: Path, args: list[str], shown_when: str,
                       env: dict[str, str] | None = None) -> str:
    """`runnerq-mongo ARGS &` typed in an interactive shell of a terminal (tmux): the screen
    once `shown_when` is on it. The command is killed at the end (tmux leaves it)."""
    tmux = [str(shutil.which("tmux")), "-L", f"rq-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    pid_file = tmp_path / "server.pid"
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in
                      {**(env or {}), "PYTHONPATH": str(ROOT)}.items())
    command = (f"{shlex.quote(sys.executable)} -m runnerq_cli {shlex.join(args)} & "
               f"echo $! > {shlex.quote(str(pid_file))}; sleep 30")
    script = tmp_path / "bg.sh"
    script.write_text(f"cd {shlex.quote(str(ROOT))}\n{exports}{command}\n")
    subprocess.run([*tmux, "new-session", "-d", "-s", "w", "-x", "120", "-y", "30",
                    f"bash --norc --noprofile -i {shlex.quote(str(script))}"], check=True)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p", "-t", "w"],
                                  capture_output=True, text=True).stdout

        wait_until(lambda: shown_when in screen(), timeout=60, interval=0.2,
                   message=f"{args[0]}'s last line")
        return screen()
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


@NEEDS_TMUX
def test_dev_server_in_the_background_says_how_to_stop_it(tmp_path) -> None:
    pytest.importorskip("mongoeco")
    shown = _in_the_background(tmp_path, ["dev-server", "--port", "0"], "Not for production")
    assert "Press Ctrl-C" not in shown, shown
    assert "Running in the background: stop it with `kill " in shown, shown


@NEEDS_TMUX
def test_console_in_the_background_says_how_to_stop_it(tmp_path, cli_env) -> None:
    """The console decides as `dev-server` does (cli/foreground.py)."""
    shown = _in_the_background(tmp_path, ["console", "--port", "0"], "stop it with",
                               {k: v for k, v in cli_env.items() if k.startswith("RUNNERQ_")})
    assert "runnerq console for queue tests: http://127.0.0.1:" in shown, shown
    assert "Press Ctrl-C" not in shown, shown
    assert "Running in the background: stop it with `kill " in shown, shown


@pytest.mark.parametrize("args", [["console", "--port", "0"], ["dev-server", "--port", "0"]])
def test_output_to_a_file_says_kill_not_ctrl_c(args, cli_env, tmp_path) -> None:
    """`console > console.log &` (or under a service manager): the log is read later, by
    someone for whom Ctrl-C means nothing; `kill PID` always works (a clean stop)."""
    if args[0] == "dev-server":
        pytest.importorskip("mongoeco")
    log = tmp_path / "out.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "runnerq_cli", *args], stdout=out,
                                stderr=subprocess.PIPE, text=True, env=cli_env)
    try:
        wait_until(lambda: "kill" in log.read_text(), timeout=60, interval=0.1,
                   message="the start-up's last line")
        text = log.read_text()
        assert "Ctrl-C" not in text, text
        assert text.splitlines()[-1].endswith(f"Stop it with `kill {proc.pid}`."), text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

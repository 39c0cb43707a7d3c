"""README.md runs as written (issue 19): its quick start and its tour, read from the
README's text, run in one bash session against the suite's server, and its Python
example runs and says that its worker started.

The commands run are the `$ ` lines of the ```console blocks between
`<!-- SECTION:quickstart -->` / `<!-- SECTION:tour -->` and their `<!-- END:... -->`
(heredocs and `\\` continuations included); the lines after a command, up to the next
`$ `, are the output the README shows, and each must appear in what it prints. Only the
lines in REPLACED are swapped, each for a stated reason; every other line runs verbatim,
`id=$(... -q)` captures included. Every command must exit as EXIT says (0 by default).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pymongo import MongoClient

from tests.waiting import LineReader

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTIONS = ("quickstart", "tour")

# The only README lines not run verbatim: line (without its comment) -> what runs instead.
REPLACED: dict[str, str] = {
    # The suite already runs in an environment with the package installed.
    "python3.13 -m venv .venv && . .venv/bin/activate": "true",
    "pip install -e '.[dev-server]'": "true",
    # The suite's server instead of a new one (RUNNERQ_MONGO_URI points at it, with a
    # fresh database); `--init` created the indexes, as init-indexes does.
    "runnerq-mongo dev-server --init &": "runnerq-mongo init-indexes >/dev/null",
}
# Commands whose documented exit code may be other than 0 here (the README says which).
EXIT: dict[str, tuple[int, ...]] = {
    # "is this deployment healthy? exit 7 if not": work no live worker handles may count.
    "runnerq-mongo doctor": (0, 7),
}

@dataclass
class Command:
    where: str  # README.md:LINE
    text: str  # as bash runs it (a heredoc's lines included)
    shown: list[str] = field(default_factory=list)  # the output the README shows


def _without_comment(line: str) -> str:
    """The command without a trailing `# comment` (outside quotes)."""
    quoted = re.sub(r"'[^']*'|\"(?:\\.|[^\"\\])*\"", lambda m: "Q" * len(m.group()), line)
    cut = re.search(r"\s#", quoted)
    return (line[:cut.start()] if cut else line).strip()


def readme_commands(text: str) -> list[Command]:
    """The `$ ` commands of the console blocks inside the README's run sections."""
    commands: list[Command] = []
    lines = text.splitlines()
    section = None
    block = False
    heredoc: str | None = None
    for number, line in enumerate(lines, 1):
        marker = re.fullmatch(r"<!-- (SECTION|END):(\w+) -->", line.strip())
        if marker:
            section = marker.group(2) if marker.group(1) == "SECTION" else None
            continue
        if section not in SECTIONS:
            continue
        if not block:
            block = line.strip() == "```console"
            continue
        if heredoc is not None:
            commands[-1].text += "\n" + line
            if line == heredoc:
                heredoc = None
            continue
        if line.strip() == "```":
            block = False
        elif line.startswith("$ "):
            commands.append(Command(f"README.md:{number}", line[2:]))
            here = re.search(r"<<-?\s*'?(\w+)'?", _without_comment(line[2:]))
            heredoc = here.group(1) if here else None
        elif commands and commands[-1].text.endswith("\\"):
            commands[-1].text += "\n" + line
        elif commands and line.strip():
            commands[-1].shown.append(line.strip())
    return commands


COMMANDS = readme_commands(README.read_text())


def test_the_readme_has_its_quick_start_and_tour() -> None:
    text = README.read_text()
    for name in SECTIONS:
        assert f"<!-- SECTION:{name} -->" in text and f"<!-- END:{name} -->" in text, name
    keys = [_without_comment(c.text.splitlines()[0]) for c in COMMANDS]
    assert len(COMMANDS) >= 20, keys
    # Every replacement still names a README line (none kept for a line since removed).
    assert set(REPLACED) <= set(keys), set(REPLACED) - set(keys)
    # The ids are captured with -q and used as "$id", never a pasted example id.
    assert any(re.match(r"id=\$\(runnerq-mongo enqueue .* -q\)$", k) for k in keys), keys
    assert not re.search(r"\b[0-9a-f]{8}-[0-9a-f]{4}-", text), "an example id in README.md"


@dataclass
class Ran:
    command: Command
    code: int
    stdout: str
    stderr: str
    variables: dict[str, str]  # the captured ones (`id=$(...)`), after this command


@dataclass
class ReadmeRun:
    ran: list[Ran]
    variables: dict[str, str]
    env: dict[str, str]


def _script(commands: list[Command], out: Path) -> str:
    """One bash session: each command's output and exit code to files, in order."""
    names = sorted({m.group(1) for c in commands
                    for m in re.finditer(r"^(\w+)=\$\(", c.text, re.M)})
    parts = ["set -u"]
    for index, command in enumerate(commands):
        first, *rest = command.text.split("\n")
        key = _without_comment(first)
        text = "\n".join([REPLACED[key], *rest]) if key in REPLACED else command.text
        parts.append(f"{{ {text}\n}} >'{out}/{index}.out' 2>'{out}/{index}.err' </dev/null\n"
                     f"echo $? >'{out}/{index}.rc'")
        # The captured variables as they are after this command.
        parts += [f"printf '%s=%s\\n' {name} \"${{{name}-}}\" >>'{out}/{index}.vars'"
                  for name in names]
    return "\n".join(parts) + "\n"


@pytest.fixture
def readme_run(server, tmp_path: Path):
    """The quick start and the tour, run in a fresh directory and database."""
    work = tmp_path / "readme"
    out = tmp_path / "out"
    work.mkdir()
    out.mkdir()
    database = f"rq_readme_{uuid.uuid4().hex[:10]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    bindir = str(Path(sys.executable).parent)
    # The suite's server serves one request at a time, in the test process: on a busy
    # machine a heartbeat can wait past the 5 s default and the client drops its pool.
    env.update(RUNNERQ_MONGO_URI=server.uri, RUNNERQ_DATABASE=database,
               RUNNERQ_CONNECT_TIMEOUT="30s", RUNNERQ_SERVER_SELECTION_TIMEOUT="30s",
               XDG_CONFIG_HOME=str(tmp_path / "xdg"), NO_COLOR="1", COLUMNS="80",
               PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}")
    prelude = ""
    if not (Path(bindir) / "runnerq-mongo").exists():  # not installed: the same CLI, by module
        prelude = f"runnerq-mongo() {{ '{sys.executable}' -m runnerq_cli \"$@\"; }}\n"
    script = prelude + _script(COMMANDS, out)
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    ran = [Ran(c, int((out / f"{i}.rc").read_text()), (out / f"{i}.out").read_text(),
               (out / f"{i}.err").read_text(),
               dict(line.split("=", 1) for line in (out / f"{i}.vars").read_text().splitlines()))
           for i, c in enumerate(COMMANDS)]
    yield ReadmeRun(ran, ran[-1].variables, env)
    with MongoClient(server.uri) as client:
        client.drop_database(database)


def _report(r: Ran) -> str:
    return (f"{r.command.where}: $ {r.command.text}\nexit {r.code}\n"
            f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")


def _status(readme_run: ReadmeRun, activity_id: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "runnerq_cli", "show", activity_id,
                           "-o", "json"], env=readme_run.env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["activity"]["status"]


@pytest.mark.proof
def test_the_quick_start_and_the_tour_run_as_written(readme_run: ReadmeRun) -> None:
    """One run of the README (as a newcomer would type it), every check on it."""
    assert len(readme_run.ran) == len(COMMANDS)
    for r in readme_run.ran:
        key = _without_comment(r.command.text.splitlines()[0])
        assert r.code in EXIT.get(key, (0,)), _report(r)
        assert "Traceback" not in r.stderr, _report(r)
        for line in r.command.shown:
            assert line in [printed.strip() for printed in r.stdout.splitlines()], (
                f"the README shows {line!r}\n{_report(r)}")

    # `id=$(runnerq-mongo enqueue ... -q)` keeps one full id, which later commands use.
    assert {"id", "charge"} <= set(readme_run.variables)
    for value in readme_run.variables.values():
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                            value), readme_run.variables
    shows = [r for r in readme_run.ran if r.command.text.startswith('runnerq-mongo show "$id"')]
    assert shows, 'README: no `show "$id"`'
    for r in shows:
        assert r.variables["id"] in r.stdout and "completed" in r.stdout, _report(r)
    assert _status(readme_run, readme_run.variables["id"]) == "completed"

    # The tour's `worker --handler send_email=mail:send` runs send_email only, so charge,
    # which no worker of the tour handles, is still pending (a worker claims only its types).
    assert _status(readme_run, readme_run.variables["charge"]) == "pending", \
        "the tour's worker leaves charge pending"

    # The tour's durable refund: parked by the first worker (tree shows what it waits
    # for), woken by the signal, completed by the second worker.
    refund = readme_run.variables["refund"]
    [tree] = [r for r in readme_run.ran if r.command.text.startswith('runnerq-mongo tree')]
    assert "waiting for signal approve" in tree.stdout and refund[:8] in tree.stdout, (
        _report(tree))
    assert all(len(line) <= 80 for line in tree.stdout.splitlines()), _report(tree)
    [signal] = [r for r in readme_run.ran if r.command.text.startswith('runnerq-mongo signal')]
    assert signal.stdout.startswith(f"signalled {refund} (refund) approve: woke it"), (
        _report(signal))
    assert _status(readme_run, refund) == "completed"


def _python_example() -> str:
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "README.md: one Python example"
    return blocks[0]


def test_the_python_example_says_its_worker_started_and_works(server, tmp_path) -> None:
    """Run as written: it logs that its worker started (no silent block), runs the
    activity it enqueued, and stops cleanly on SIGTERM."""
    database = f"rq_readme_py_{uuid.uuid4().hex[:10]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    env.update(RUNNERQ_MONGO_URI=server.uri, RUNNERQ_DATABASE=database,
               XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _python_example()], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            restore_signals=True)
    try:
        assert proc.stderr is not None
        log = LineReader(proc.stderr)
        log.wait_for(lambda line: "worker started" in line, timeout=60,
                     message="the worker's start line")
        log.wait_for(lambda line: "completed send_email" in line, timeout=60,
                     message="the enqueued activity to complete")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        rest = log.rest()
        assert code == 0, "".join(log.lines) + rest
        assert "Traceback" not in "".join(log.lines) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with MongoClient(server.uri) as client:
            client.drop_database(database)


def test_ci_runs_the_readmes_test_command() -> None:
    """"Running the tests" gives the command; .ci/run and the public workflow run it."""
    section = README.read_text().split("## Running the tests", 1)[1]
    commands = re.findall(r"^\$ (python -m pytest.*)$", section, re.M)
    assert commands == ["python -m pytest -n 2"], commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^time \.venv/bin/{re.escape(commands[0])}$", ci, re.M), ci
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert f"run: {commands[0]}\n" in workflow

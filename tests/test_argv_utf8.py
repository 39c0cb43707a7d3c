"""Arguments are decoded once, at the edge (issue 16, classes 2 and 3).

Python hands a command-line argument that is not valid UTF-8 over as lone
surrogates; anything that later encodes it (BSON, an audit record, a log line)
fails, once after a delete had already deleted. `runnerq-mongo` refuses such an
argument before any command runs: exit 2, one line, nothing read or written.
The sweep walks the live command tree and tries every option and argument
that takes text; a few cases run as real processes with bytes argv.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import typer

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.app import app
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.typer_compat import context_class

BAD = os.fsdecode(b"ab\xff\xfecd")  # surrogate escapes, as Python decodes such argv
Context = context_class()


def text_parameters() -> list[tuple[list[str], str, bool]]:
    """(command path, option name or argument metavar, is_option) of every parameter that
    takes text, from typer's click tree (so a new option is swept without listing it)."""
    root = typer.main.get_command(app)
    out: list[tuple[list[str], str, bool]] = []

    def takes_text(param: Any) -> bool:  # every value is text on the command line
        return not getattr(param, "is_flag", False) and not getattr(param, "count", False)

    def walk(command: Any, ctx: Any, path: list[str]) -> None:
        for param in command.get_params(ctx):
            if param.name in ("help",) or not takes_text(param):
                continue
            if param.param_type_name == "option":
                out.append((path, param.opts[0], True))
            else:
                out.append((path, param.name, False))
        for name in getattr(command, "list_commands", lambda c: [])(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                walk(sub, Context(sub, info_name=name, parent=ctx), [*path, name])

    walk(root, Context(root, info_name="runnerq-mongo", **(root.context_settings or {})), [])
    return out


PARAMETERS = text_parameters()


def test_the_sweep_covers_the_options_that_crashed() -> None:
    seen = {(" ".join(path), name) for path, name, _ in PARAMETERS}
    for case in [("delete", "--reason"), ("delete", "--actor"), ("purge", "--reason"),
                 ("dlq import", "--reason"), ("audit", "--actor"), ("audit", "--action"),
                 ("dlq export", "--type"), ("retry", "--error-contains"),
                 ("pause", "--reason"), ("enqueue", "--metadata"), ("", "--queue")]:
        assert case in seen, case
    assert len(PARAMETERS) > 100


@pytest.fixture
def seeded(settings, cli_env) -> RunnerQ:
    """A queue with something for every command to read, change or delete."""
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    for _ in range(3):
        rq.enqueue("job", {})
    claim = rq.dequeue("w1")[0]
    rq.ack_success(claim, {"ok": 1})
    return rq


def _state(rq: RunnerQ) -> dict[str, list[Any]]:
    db = rq.context.activities.database
    return {name: sorted(map(repr, db[name].find())) for name in db.list_collection_names()}


def test_every_text_option_refuses_invalid_utf8_before_anything(seeded, run_cli) -> None:
    before = _state(seeded)
    failures = []
    for path, name, is_option in PARAMETERS:
        for args in ([*path, name, BAD], [*path, f"{name}={BAD}"]) if is_option else (
                [*path, BAD],):
            res = run_cli(*args)
            lines = res.stderr.splitlines()
            if (res.code != ExitCode.USAGE or res.stdout or len(lines) != 1
                    or "not valid UTF-8" not in lines[0] or "\\xff\\xfe" not in lines[0]):
                failures.append((args, res))
    assert not failures, failures[:3]
    assert _state(seeded) == before  # nothing read-and-changed, nothing written


@pytest.mark.parametrize("args", [
    [b"delete", b"--status", b"completed", b"--max", b"3", b"--yes", b"--reason", b"ab\xff\xfecd"],
    [b"pause", b"--reason", b"ok", b"--actor", b"mal\xfflory"],
    [b"enqueue", b"job", b"-p", b"{}", b"--metadata", b"team=\xff"],
    [b"--queue", b"\xffq", b"doctor"],
])
def test_bytes_argv_in_a_real_process(seeded, cli_env, args) -> None:
    before = _state(seeded)
    proc = subprocess.run([os.fsencode(sys.executable), b"-m", b"runnerq_cli", *args],
                          capture_output=True, timeout=60, env=cli_env)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert proc.stdout == b""
    assert proc.stderr.startswith(b"error: argument ") and b"not valid UTF-8" in proc.stderr
    assert proc.stderr.count(b"\n") == 1 and b"Traceback" not in proc.stderr
    assert _state(seeded) == before


def test_short_q_means_quiet_everywhere(run_cli) -> None:
    """`-q` is `--quiet` wherever it exists (issue 19); `--queue` has no short form."""
    root = typer.main.get_command(app)
    meanings = set()

    def walk(command: Any, ctx: Any) -> None:
        for param in command.get_params(ctx):
            if "-q" in getattr(param, "opts", []):
                meanings.add(tuple(o for o in param.opts if o.startswith("--")))
        for name in getattr(command, "list_commands", lambda c: [])(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                walk(sub, Context(sub, info_name=name, parent=ctx))

    walk(root, Context(root, info_name="runnerq-mongo", **(root.context_settings or {})))
    assert meanings == {("--quiet",)}
    res = run_cli("doctor", "-q", "default")
    assert res.code == ExitCode.USAGE and "-q" in res.stderr

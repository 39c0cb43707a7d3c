"""`--help` and completion must not import what they don't need (issue 4).

Behaviour, not timing (timing is benchmarks/bench_cli_startup.py): in a
fresh interpreter, after the help or completion path has run, the driver,
the backend and rich are not in sys.modules.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import runnerq_cli

PACKAGE = Path(runnerq_cli.__file__).parent

HEAVY = ("pymongo", "bson", "rich", "yaml", "prometheus_client", "runnerq_cli.backend")

PROBE = """
import contextlib, io, json, sys
from runnerq_cli.cli.app import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] in ("pymongo", "bson", "rich", "yaml", "prometheus_client")
               or m == "runnerq_cli.backend" or m.startswith("runnerq_cli.backend.")
               or m == "runnerq_cli.cli.exposition")
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("args", [
    ["--help"],
    ["-h"],
    ["completion", "show", "bash"],
    ["completion", "show", "zsh"],
    ["completion", "--help"],
    ["cancel", "--help"],
    ["redrive", "--help"],
    ["doctor", "--help"],
    ["explain", "--help"],
    ["queues", "--help"],
    ["metrics", "--help"],
    ["metrics", "serve", "--help"],
    ["stats", "--help"],
])
def test_help_and_completion_import_nothing_heavy(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["heavy"] == [], f"{' '.join(args)} imported {report['heavy']}"


def test_generator_imports_nothing_heavy() -> None:
    code = ("import sys; from runnerq_cli.cli.completion_scripts import generate; "
            "generate('fish'); print(sorted(m for m in sys.modules "
            f"if m.split('.')[0] in {HEAVY[:5]!r} or m.startswith('runnerq_cli.backend')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_command_run_does_not_import_pydantic(tmp_path) -> None:
    """typer 0.29 coerces every parameter through pydantic (~0.1 s of CPU per run); our
    plain parameters skip it (cli/typer_compat.py, benchmarks/README.md: per-command CPU)."""
    code = ("import contextlib, io, sys\n"
            "from runnerq_cli.cli.app import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    code = main(['--queue', 'q1', 'config', 'show', '-o', 'json'])\n"
            "bad = main(['enqueue', 't', '--batch-size', '0'])\n"
            "print(code, bad, sorted(m for m in sys.modules if m.startswith('pydantic')))\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RUNNERQ_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == ["0", "2"]  # ran; a value out of range is still refused
    assert proc.stderr.startswith("error: Invalid value for '--batch-size'")
    assert proc.stdout.strip().endswith("[]"), proc.stdout


def test_every_command_is_mapped_to_the_module_that_registers_it() -> None:
    """cli/app.py's MODULE_OF, which a run uses to load its command's module alone, is
    what the modules register: nothing missing, nothing misattributed."""
    import importlib

    import typer

    from runnerq_cli.cli.app import COMMAND_MODULES, MODULE_OF

    registered: dict[str, str] = {}
    for module in COMMAND_MODULES:
        probe = typer.Typer()
        importlib.import_module(f"runnerq_cli.cli.commands.{module}").register(probe)
        names = [info.name or info.callback.__name__.replace("_", "-")
                 for info in probe.registered_commands]
        names += [str(info.name or info.typer_instance.info.name)
                  for info in probe.registered_groups]
        registered.update(dict.fromkeys(names, module))
    assert registered == MODULE_OF


# What one `enqueue` must not load: its producer (backend/producer.py) needs none of them
# (benchmarks/bench_cli_startup.py part 2: every module costs its compile time where
# byte-code is not cached). Each a module, or a package and everything under it.
NOT_FOR_ENQUEUE = (
    "runnerq_cli.backend.api",  # RunnerQ: the worker's, the chores' and the views' modules
    "runnerq_cli.backend.queue.queue", "runnerq_cli.backend.queue.claims",
    "runnerq_cli.backend.queue.acknowledgements", "runnerq_cli.backend.queue.leases",
    "runnerq_cli.backend.queue.maintenance", "runnerq_cli.backend.queue.durable",
    "runnerq_cli.backend.queue.intake", "runnerq_cli.backend.queue.flow_claims",
    "runnerq_cli.backend.domain.queries", "runnerq_cli.backend.domain.flow",
    "runnerq_cli.backend.views", "runnerq_cli.backend.ops", "runnerq_cli.backend.diagnosis",
    "runnerq_cli.worker", "runnerq_cli.console", "runnerq_cli.aio", "rich", "yaml",
    # Split off what one enqueue does not use (each its compile time, uncached): the
    # documents read back, the outbox writer, the durable statements, the outage watch,
    # the flow limits' cache, and `enqueue --from`'s reading and report.
    "runnerq_cli.backend.domain.documents", "runnerq_cli.backend.store.writes",
    "runnerq_cli.backend.domain.waits", "runnerq_cli.backend.domain.outage",
    "runnerq_cli.backend.store.flowstate", "runnerq_cli.cli.enqueue_from",
    # ... and what only a failed call, a computed time or a key uses: the translation of
    # driver errors, the update pipelines of server times, the keyed and debounced path.
    "runnerq_cli.backend.store.failures", "runnerq_cli.backend.store.update_pipelines",
    "runnerq_cli.backend.queue.keyed", "runnerq_cli.backend.domain.keys",
    "runnerq_cli.cli.json_stream",  # a long list's JSON, streamed: --from and dlq import
    "runnerq_cli.plural",  # counts in words: only a refusal's message counts here
    # The parsers a plain enqueue never runs (values.py's durations and times, one-line
    # text and worker ids, filters, paths to write), an NDJSON line's reading, the config
    # file's (there is none here), the list settings' and a trace context's checks (none).
    "runnerq_cli.times", "runnerq_cli.texts", "runnerq_cli.filter_values", "runnerq_cli.paths",
    "runnerq_cli.backend.domain.spec_lines", "runnerq_cli.config_file",
    "runnerq_cli.setting_lists", "runnerq_cli.backend.domain.traceparent",
    # The event types (an enum built at import: the outbox writes the Enqueued event), root
    # --help's sections, and the question a bulk action asks before it acts.
    "runnerq_cli.backend.domain.event_types", "runnerq_cli.cli.root_help",
    "runnerq_cli.cli.confirmation",
    "runnerq_cli.backend.store.cursors",  # what a read returns: an enqueue reads nothing back
    "runnerq_cli.cli.payload_files",  # --payload @FILE and @-: these payloads are inline
    "runnerq_cli.cli.error_hints",  # what a failed run's error line adds: none failed
)


@pytest.mark.parametrize("args", [["enqueue", "t", "-q"], ["enqueue", "t", "-p", "{}"]])
def test_an_enqueue_loads_its_own_command_and_the_producer_only(server, db_name, tmp_path,
                                                                args) -> None:
    """One `enqueue` imports the enqueue command and the producer's modules: not the other
    commands, not RunnerQ with the worker's, the chores' and the views' parts, not the
    operator, dead-letter, metrics, diagnosis or console (per-command CPU,
    benchmarks/bench_cli_startup.py part 2), and it still enqueues."""
    code = ("import contextlib, io, json, sys\n"
            "from runnerq_cli.cli.app import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    code = main(sys.argv[1:])\n"
            "print(json.dumps({'code': code, 'out': out.getvalue(), 'modules': sorted(\n"
            "    m for m in sys.modules if m.startswith(('runnerq_cli.', 'rich', 'yaml')))}))\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RUNNERQ_")
           and k not in ("TRACEPARENT", "TRACESTATE")}  # a CI's trace: a context to check
    env.update(XDG_CONFIG_HOME=str(tmp_path), RUNNERQ_MONGO_URI=server.uri,
               RUNNERQ_DATABASE=db_name)
    proc = subprocess.run([sys.executable, "-c", code, *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["code"] == 0 and re.search(r"[0-9a-f-]{36}", report["out"]), report
    loaded = set(report["modules"])
    assert "runnerq_cli.cli.commands.enqueue" in loaded
    assert "runnerq_cli.backend.producer" in loaded  # (a renamed module fails here first)
    commands = {m for m in loaded if m.startswith("runnerq_cli.cli.commands.")}
    assert commands == {"runnerq_cli.cli.commands.enqueue"}, commands
    wrong = sorted(m for m in loaded for heavy in NOT_FOR_ENQUEUE
                   if m == heavy or m.startswith(f"{heavy}."))
    assert not wrong, f"{' '.join(args)} imported {wrong}"
    for heavy in NOT_FOR_ENQUEUE:  # each name is a real module: none checks nothing
        assert heavy in ("rich", "yaml") or (PACKAGE.parent / heavy.replace(".", "/")).with_suffix(
            ".py").is_file() or (PACKAGE.parent / heavy.replace(".", "/")).is_dir(), heavy


def test_root_help_lists_the_commands_as_their_modules_register_them() -> None:
    """Root --help loads no command module: it lists them from cli/summaries.py, which must
    be what the modules register (regenerate: python -m runnerq_cli.cli.summary_writer --write),
    and prints what the root with every command registered prints."""
    from runnerq_cli.cli.app import _root_command, build_app
    from runnerq_cli.cli.summary_writer import main as summaries_main

    assert summaries_main(["--check"]) == 0
    full, light = _root_command(build_app()), _root_command(build_app(()))
    for args in (["--help"], []):
        shown = [command.make_context("runnerq-mongo", list(args), resilient_parsing=True)
                 .get_help() for command in (full, light)]
        assert shown[0] == shown[1]
    code = ("import sys\nfrom runnerq_cli.cli.app import main\n"
            "code = main(['--help'])\n"
            "print(code, sorted(m for m in sys.modules if '.commands.' in m))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 []", proc.stdout
    assert "cancel" in proc.stdout and "Act:" in proc.stdout


def test_a_command_typed_after_an_unknown_root_word_still_loads() -> None:
    """`--` hides the command word from the look-ahead (argv.py): the root alone is built
    and the command named after it is loaded from its module when click asks for it."""
    code = ("import contextlib, io\nfrom runnerq_cli.cli.app import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    code = main(['--', 'cancel', '--help'])\n"
            "print(code, 'Cancel pending' in out.getvalue())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "True"], proc.stdout


def test_unrun_code_names_what_a_command_compiles_but_never_runs(server, db_name,
                                                                 tmp_path) -> None:
    """benchmarks/unrun_code.py (CONTRIBUTING.md, "What a command costs to start"): a plain
    enqueue never runs `_emit_one` (-o json only) and does run `_print_one`."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RUNNERQ_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path), RUNNERQ_MONGO_URI=server.uri,
               RUNNERQ_DATABASE=db_name)
    script = PACKAGE.parent / "benchmarks" / "unrun_code.py"
    proc = subprocess.run([sys.executable, str(script), "--module", "runnerq_cli.cli.commands",
                           "--top", "50", "--", "enqueue", "t", "-q"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (enqueue,) = [line for line in lines if "runnerq_cli.cli.commands.enqueue" in line]
    assert "_emit_one" in enqueue and "_print_one" not in enqueue, enqueue
    assert re.fullmatch(r"\d+ modules of ours loaded \([\d,]+ bytes of source\): compiling "
                        r"them takes [\d.]+ ms, [\d.]+ ms of it for functions never run",
                        lines[-1]), lines[-1]


def test_the_signatures_typer_reads_at_every_run_are_not_strings() -> None:
    """typer builds the root and the run command's parameters from their signatures at
    every run; string annotations (`from __future__ import annotations`) make
    typing.get_type_hints compile each one (about 2 ms of CPU a run). The root callback,
    `enqueue` (a CI step's command) and the completers keep evaluated annotations."""
    from runnerq_cli.cli import app, choices
    from runnerq_cli.cli.commands import enqueue

    for function in (app.root, app._version, enqueue.enqueue,
                     choices.completer(("a",))):
        strings = {name: value for name, value in function.__annotations__.items()
                   if isinstance(value, str)}
        assert not strings, f"{function.__qualname__}: {strings}"

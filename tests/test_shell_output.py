"""A shell handler's output read with bounded memory (issue 23, part 4): standard output
is kept whole only up to pipes.OUTPUT_MAX_BYTES, standard error only its tail; and the
`--exec` assignments the worker cannot run are refused before it starts (part 9).

Memory itself is measured in benchmarks/bench_shell_rss.py, not here.
"""

from __future__ import annotations

import pytest

from runnerq_cli.backend.domain.models import Status
from runnerq_cli.worker.api import build_registry
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.pipes import OUTPUT_MAX_BYTES
from runnerq_cli.worker.shell import STDERR_TAIL, STDOUT_TEXT_TAIL

BIG = OUTPUT_MAX_BYTES + 4 * 1024 * 1024


def run(backend, command: str, payload: dict | None = None):
    registry = build_registry(commands={"sh": command})
    aid = backend.enqueue("sh", payload or {}, max_retries=1, timeout_seconds=60).activity_id
    worker = Worker(backend, registry, burst=True, poll_interval=0.2)
    assert worker.run(install_signals=False) == WorkerEnd.STOPPED
    return backend.get_activity(aid), aid


def test_output_past_the_bound_ends_as_its_last_16_kib(backend):
    act, aid = run(backend, f"sh -c 'head -c {BIG} /dev/zero | tr \"\\0\" x; echo; "
                            "echo the end'")
    assert act.status == Status.COMPLETED
    data = backend.get_result(aid).data
    assert data.startswith("…x") and data.endswith("the end")
    assert len(data.encode()) <= STDOUT_TEXT_TAIL + 4


@pytest.mark.proof
def test_json_output_within_the_bound_is_the_result(backend):
    act, aid = run(backend, "sh -c 'printf \"[\"; seq -s, 1 200000; printf \"]\"'")
    assert act.status == Status.COMPLETED
    assert backend.get_result(aid).data[-1] == 200000


def test_a_large_payload_and_stderr_of_a_failing_command_are_bounded(backend):
    act, _ = run(backend, f"sh -c 'cat; head -c {BIG} /dev/zero | tr \"\\0\" e >&2; "
                          "echo last words >&2; exit 100'", {"blob": "p" * 3_000_000})
    assert act.status == Status.FAILED
    assert act.last_error.startswith("exit status 100: …e")
    assert act.last_error.endswith("last words")
    assert len(act.last_error.encode()) <= STDERR_TAIL + 40


def test_an_exec_whose_first_word_holds_an_equals_sign_is_refused(run_cli):
    done = run_cli("worker", "--burst", "--exec", "a=b=cat")
    assert done.code == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: command 'b=cat'")
    assert "env VAR=value COMMAND" in lines[0]
    assert run_cli("worker", "--burst", "--exec", "a=env b=1 cat").code == 0


@pytest.mark.parametrize("command, word", [("sleep 2; cat", "2;"), ("cat | jq .", "|"),
                                           ("make && make test", "&&"), ("./x > out", ">")])
def test_an_exec_with_shell_syntax_is_refused_at_start(run_cli, command, word):
    # Without a shell these words reach the program as arguments: every attempt would
    # fail (or do something else), so the worker says so before it claims anything.
    done = run_cli("worker", "--burst", "--exec", f"t={command}")
    assert done.code == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: command '{command}': '{word}'")
    assert "without a shell" in lines[0] and "sh -c" in lines[0]


@pytest.mark.parametrize("command", ["tr '|' ,", r"find . -name x -exec true {} \;",
                                     "sh -c 'sleep 0; cat'", "echo 'a; b'"])
def test_quoted_or_escaped_shell_words_are_arguments(run_cli, command):
    assert run_cli("worker", "--burst", "--exec", f"t={command}").code == 0

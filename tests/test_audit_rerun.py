"""The audit trail's recorded command re-runs as written (issue 25, point 9)."""

from __future__ import annotations

import json
import shlex


def test_the_recorded_command_reruns_as_written(queue, run_cli) -> None:
    for _ in range(3):
        queue.enqueue("resize", {}, metadata={"team": "media ops"})
    queue.enqueue("charge", {})
    res = run_cli("cancel", "--type", "resize", "--metadata", "team=media ops", "--max", "2",
                  "--yes", "--reason", "disk full on the thumbnail host")
    assert res.code == 0, res.stderr
    audit = run_cli("audit", "-o", "jsonl")
    assert audit.code == 0, audit.stderr
    [command] = [json.loads(line)["detail"]["command"] for line in audit.stdout.splitlines()
                 if json.loads(line)["detail"].get("command")]
    assert command.startswith("runnerq-mongo cancel ") or " cancel " in f" {command} "
    assert "--type=resize" in command and "--max=2" in command, command
    assert "--types" not in command and "--max-count" not in command, command
    argv = shlex.split(command)
    again = run_cli(*argv[argv.index("cancel"):])  # as written, from the audit
    assert again.code == 0, (command, again.stderr)
    assert queue.context.activities.count_documents(
        {"activity_type": "resize", "status": "cancelled"}) == 3


def test_the_recorded_command_names_its_queue(queue, run_cli) -> None:
    """A queue chosen by a flag or the environment is in the command: re-run elsewhere
    (another RUNNERQ_QUEUE, none), it acts on that queue again, not on `default`."""
    q2 = queue.for_queue("q2")
    q2.maintenance.init_indexes()
    res = run_cli("pause", "--reason", "x y", env={"RUNNERQ_QUEUE": "q2"})
    assert res.code == 0, res.stderr
    audit = run_cli("--queue", "q2", "audit", "-o", "jsonl")
    [command] = [json.loads(line)["detail"]["command"] for line in audit.stdout.splitlines()]
    assert "--queue=q2 pause --reason='x y'" in command, command
    assert run_cli("--queue", "q2", "resume").code == 0
    argv = shlex.split(command)
    again = run_cli(*argv[1:], env={"RUNNERQ_QUEUE": "default"})  # as written
    assert again.code == 0, (command, again.stderr)
    assert q2.control.paused().all and q2.control.paused().reason == "x y"
    assert not queue.for_queue("default").control.paused().active

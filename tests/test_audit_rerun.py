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

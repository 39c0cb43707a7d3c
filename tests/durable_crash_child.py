"""A process that runs one durable storage operation and dies (os._exit, as SIGKILL
would leave it: nothing flushed, nothing cleaned up) just before sending its Nth command
(tests/test_durable_crashes.py). Arguments: one JSON object."""

from __future__ import annotations

import json
import os
import sys
import uuid

from pymongo import monitoring

# Commands that are the driver's own (connection checks, the server clock's reads).
OWN = {"hello", "ismaster", "isMaster", "ping", "buildInfo", "buildinfo", "endSessions",
       "getParameter", "serverStatus"}


class KillAt(monitoring.CommandListener):
    def __init__(self, at: int) -> None:
        self.at = at
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in OWN:
            return
        self.count += 1
        if self.count == self.at:
            os._exit(9)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def main() -> None:
    args = json.loads(sys.argv[1])
    listener = KillAt(int(args["kill_at"]))
    monitoring.register(listener)
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.documents import Activity, Claim
    from runnerq_cli.backend.domain.specs import ActivitySpec
    from runnerq_cli.config import load_settings

    settings = load_settings(None, overrides={"uri": args["uri"], "database": args["db"],
                                              "queue": args["queue"]},
                             environ={"RUNNERQ_CONFIG": ""})
    rq = RunnerQ(settings)
    rq.ping()
    listener.count = 0  # count the operation's commands only

    def claim(name: str) -> Claim:
        aid = uuid.UUID(args[name])
        doc = rq.context.activities.find_one({"_id": aid})
        listener.count = 0
        return Claim(Activity.from_doc(doc), doc["lease_id"], doc["worker_id"],
                     doc["lease_deadline"])

    op = args["op"]
    if op == "spawn":
        rq.durable.spawn(claim("parent"), ActivitySpec("child", {}, idempotency_key="k"))
    elif op == "succeed":
        rq.ack_success(claim("child"), {"ok": 1})
    elif op == "fail":
        rq.ack_failure(claim("child"), "boom", retryable=False)
        rq.flush_outbox()
    elif op == "park":
        c = claim("parent")
        child = uuid.UUID(args["child"])
        from datetime import UTC, datetime
        rq.durable.park(c, "await", "x", datetime(2099, 1, 1, tzinfo=UTC), result_id=child,
                        producer=child)
        rq.flush_outbox()
    elif op == "signal":
        rq.durable.signal(uuid.UUID(args["target"]), "go", {"n": 1})
    print(json.dumps({"commands": listener.count}))


if __name__ == "__main__":
    main()

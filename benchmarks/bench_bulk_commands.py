"""Commands per 1,000 activities of the bulk paths: actions by filter and by ids, dlq import.

Each path runs once on 1,000 activities (inserted directly) at its default batch
size, through a client whose commands are counted (a pymongo CommandListener);
the figure is every command the run sends, start-up included (the select's count
and find, the audit record's insert and last update).

    python benchmarks/bench_bulk_commands.py [N]       (default 1000)

Against RUNNERQ_BENCH_MONGO_URI, else a dev server in its own process.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchserver import start_server  # noqa: E402

from runnerq_cli.backend.api import RunnerQ  # noqa: E402
from runnerq_cli.backend.audit import AuditLog  # noqa: E402
from runnerq_cli.backend.bulk import BulkActions  # noqa: E402
from runnerq_cli.backend.dlq import DeadLetters, parse_import_line  # noqa: E402
from runnerq_cli.backend.filters import ActivityFilter  # noqa: E402
from runnerq_cli.backend.maintenance import Maintenance  # noqa: E402
from runnerq_cli.backend.operator import Operator  # noqa: E402
from runnerq_cli.backend.queue import ActivityQueue  # noqa: E402
from runnerq_cli.config import load_settings  # noqa: E402
from tests.bulk_fixtures import counted_context, insert_activities  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    uri, server = start_server()
    try:
        settings = load_settings(None, overrides={
            "uri": uri, "database": f"bench_bulk_{uuid.uuid4().hex[:8]}", "queue": "bench"},
            environ={"RUNNERQ_CONFIG": ""})
        RunnerQ(settings).init_indexes()
        for ctx, commands in counted_context(settings):
            audit = AuditLog(ctx)
            operator = Operator(ctx, Maintenance(ctx), audit)
            bulk = BulkActions(ctx, operator, audit)
            dlq = DeadLetters(ctx, ActivityQueue(ctx), operator, audit)
            runs = {}
            insert_activities(ctx, n, "pending", "a")
            commands.take()
            bulk.apply("cancel", bulk.select("cancel", ActivityFilter(types=("a",)), n))
            runs["cancel --status pending --max N (by filter)"] = commands.take()
            ids = insert_activities(ctx, n, "failed", "b")
            commands.take()
            bulk.apply("retry", ids)
            runs["retry ID... (by ids)"] = commands.take()
            insert_activities(ctx, n, "failed", "c")
            commands.take()
            bulk.apply("delete", bulk.select("delete", ActivityFilter(types=("c",)), n))
            runs["delete --status failed --max N"] = commands.take()
            lines = (parse_import_line(i, json.dumps(
                {"type": "d", "payload": {}, "original_id": str(uuid.uuid4())}))
                for i in range(1, n + 1))
            commands.take()
            dlq.dlq_import(lines, collect=False)
            runs["dlq import (keyed by original id)"] = commands.take()
            print(f"| path | commands for {n} | per 1,000 | by command |")
            print("| --- | ---: | ---: | --- |")
            for name, sent in runs.items():
                kinds = ", ".join(f"{k} {v}" for k, v in sorted(Counter(sent).items()))
                print(f"| `{name}` | {len(sent)} | {len(sent) * 1000 / n:.0f} | {kinds} |")
    finally:
        if server is not None:
            server.kill()


if __name__ == "__main__":
    main()

"""Commands per 1,000 activities of the bulk paths: actions by filter and by ids, dlq import,
purge.

Each path runs on one batch and on four batches of BATCH activities (inserted
directly), through a client whose commands are counted (a pymongo
CommandListener). The difference is what a batch costs (it does not depend on
the batch's size); what one batch costs beyond it is the start-up (the select's
count and find, the audit record's insert and last update). The figure per
1,000 is start-up + two batches of the default 500. (The dev server's `$in` slows
with big batches, hence the small ones measured.)

That extrapolation holds only for what a batch does in a fixed number of commands; the
event copies go INSERT_CHUNK (250) a command, so a batch of 500 sends more than a batch
of 50. The last line therefore measures one whole run at the default batch size:
`cancel` by filter over REAL activities (default 2,000: four full batches), start-up
included, as commands per 1,000 (0 skips it).

    python benchmarks/bench_bulk_commands.py [BATCH] [REAL]     (default 100 2000)

Against RUNNERQ_BENCH_MONGO_URI, else a dev server in its own process.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchserver import start_server  # noqa: E402

from runnerq_cli.backend.api import RunnerQ  # noqa: E402
from runnerq_cli.backend.domain.filters import ActivityFilter  # noqa: E402
from runnerq_cli.backend.domain.import_lines import parse_import_line  # noqa: E402
from runnerq_cli.backend.ops.audit import AuditLog  # noqa: E402
from runnerq_cli.backend.ops.batches import BATCH_SIZE  # noqa: E402
from runnerq_cli.backend.ops.bulk import BulkActions  # noqa: E402
from runnerq_cli.backend.ops.dlq import DeadLetters  # noqa: E402
from runnerq_cli.backend.ops.operator import Operator  # noqa: E402
from runnerq_cli.backend.queue.maintenance import Maintenance  # noqa: E402
from runnerq_cli.backend.queue.queue import ActivityQueue  # noqa: E402
from runnerq_cli.config import load_settings  # noqa: E402
from tests.bulk_fixtures import counted_context, insert_activities  # noqa: E402


def measure(ctx: Any, commands: Any, n: int, batch: int, tag: str) -> dict[str, list[str]]:
    """The commands each path sends for `n` activities (or lines) at `batch` per batch."""
    audit = AuditLog(ctx)
    operator = Operator(ctx, Maintenance(ctx), audit)
    bulk = BulkActions(ctx, operator, audit)
    dlq = DeadLetters(ctx, ActivityQueue(ctx), operator, audit)
    runs = {}
    insert_activities(ctx, n, "pending", f"a{tag}")
    commands.take()
    bulk.apply("cancel", bulk.select("cancel", ActivityFilter(types=(f"a{tag}",)), n),
               batch_size=batch)
    runs["cancel --status pending --max N"] = commands.take()
    ids = insert_activities(ctx, n, "failed", f"b{tag}")
    commands.take()
    bulk.apply("retry", ids, batch_size=batch)
    runs["retry ID... (by ids)"] = commands.take()
    insert_activities(ctx, n, "failed", f"c{tag}")
    commands.take()
    bulk.apply("delete", bulk.select("delete", ActivityFilter(types=(f"c{tag}",)), n),
               batch_size=batch)
    runs["delete --status failed --max N"] = commands.take()
    lines = (parse_import_line(i, json.dumps(
        {"type": f"d{tag}", "payload": {}, "original_id": str(uuid.uuid4())}))
        for i in range(1, n + 1))
    commands.take()
    dlq.dlq_import(lines, collect=False, batch_size=batch)
    runs["dlq import (keyed by original id)"] = commands.take()
    # Completed a day past the completed retention: what `purge --yes` deletes (with
    # their results, events and keys), audited like the CLI's purge.
    insert_activities(ctx, n, "pending", f"e{tag}")
    aged = ctx.clock() - timedelta(seconds=ctx.settings.retention_completed + 86400)
    ctx.activities.update_many({"activity_type": f"e{tag}"}, {"$set": {
        "status": "completed", "completed_at": aged, "last_outcome": "completed"}})
    commands.take()
    operator.purge(batch=batch, audit=True)
    runs["purge (completed past retention)"] = commands.take()
    return runs


def measure_real(ctx: Any, commands: Any, n: int) -> list[str]:
    """The commands of one `cancel` by filter over `n` activities at the default batch
    size, start-up included (the pool's `hello`s left out)."""
    audit = AuditLog(ctx)
    bulk = BulkActions(ctx, Operator(ctx, Maintenance(ctx), audit), audit)
    insert_activities(ctx, n, "pending", "real")
    commands.take()
    bulk.apply("cancel", bulk.select("cancel", ActivityFilter(types=("real",)), n))
    return [name for name in commands.take() if name != "hello"]


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    real = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    uri, server = start_server()
    try:
        settings = load_settings(None, overrides={
            "uri": uri, "database": f"bench_bulk_{uuid.uuid4().hex[:8]}", "queue": "bench"},
            environ={"RUNNERQ_CONFIG": ""})
        RunnerQ(settings).maintenance.init_indexes()
        for ctx, commands in counted_context(settings):
            one = measure(ctx, commands, batch, batch, "1")
            four = measure(ctx, commands, 4 * batch, batch, "4")
            print(f"batch size {batch}: commands for 1 batch, for 4 batches, per batch; "
                  f"per 1,000 at the default batch size ({BATCH_SIZE}: start-up + "
                  f"{1000 // BATCH_SIZE} batches)")
            print("| path | 1 batch | 4 batches | per batch | per 1,000 at 500 |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for name in one:
                c1, c4 = len(one[name]), len(four[name])
                per_batch = (c4 - c1) / 3
                start_up = c1 - per_batch
                per_1000 = start_up + per_batch * 1000 / BATCH_SIZE
                print(f"| `{name}` | {c1} | {c4} | {per_batch:.1f} | {per_1000:.0f} |")
            print("by command, 4 batches:", {k: dict(Counter(v)) for k, v in four.items()})
            if real > 0:
                sent = measure_real(ctx, commands, real)
                print(f"measured: cancel by filter over {real} activities at batch size "
                      f"{BATCH_SIZE}: {len(sent)} commands, {len(sent) * 1000 / real:.0f} "
                      f"per 1,000 (start-up included): {dict(Counter(sent))}")
    finally:
        if server is not None:
            server.kill()


if __name__ == "__main__":
    main()

"""`dlq import` reads line by line in batches: bad lines refused alone, a dry run that
decides like the real run, a fixed number of commands per batch, and a SIGTERM midway
that leaves an audit record a rerun completes (issue 15, issue 16 #6 #8 #11)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.import_lines import parse_import_line
from runnerq_cli.backend.ops.audit import AuditLog
from runnerq_cli.backend.ops.batches import BATCH_SIZE
from runnerq_cli.backend.ops.dlq import DeadLetters
from runnerq_cli.backend.ops.operator import Operator
from runnerq_cli.backend.queue.maintenance import Maintenance
from runnerq_cli.backend.queue.queue import ActivityQueue
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.config import Settings
from tests.bulk_fixtures import Commands, counted_context
from tests.helpers import sigterm_after_first_batch


def _line(original: uuid.UUID | None = None, **fields: Any) -> bytes:
    data: dict[str, Any] = {"type": "job", "payload": {"n": 1}, **fields}
    if original is not None:
        data["original_id"] = str(original)
    return json.dumps(data).encode()


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _records(ctx: QueueContext) -> list[dict[str, Any]]:
    return list(ctx.events.find({"activity_id": None, "detail.action": "dlq-import"})
                .sort([("timestamp", 1), ("_id", 1)]))


def test_a_bad_line_is_refused_alone(backend: RunnerQ, run_cli: Any, tmp_path: Path) -> None:
    good = [uuid.uuid4(), uuid.uuid4()]
    path = _write(tmp_path / "in.ndjson", [
        _line(good[0]), b'{"type": "job", "payload": {"s": "\xff\xfe"}}',
        b"[" * 50_000, _line(good[1]), b'{"type": ', _line(payload=[1])])
    res = run_cli("dlq", "import", str(path), "-o", "jsonl")
    assert res.code == 2, res
    rows = [json.loads(r) for r in res.stdout.splitlines()]
    assert [(r["line"], r["outcome"]) for r in rows] == [
        (1, "enqueued"), (2, "invalid"), (3, "invalid"), (4, "enqueued"), (5, "invalid"),
        (6, "invalid")]
    assert "not UTF-8" in rows[1]["reason"] and "nested deeper" in rows[2]["reason"]
    assert res.stderr == "error: 4 of 6 lines not imported\n"
    assert backend.context.activities.count_documents({}) == 2


def test_dry_run_decides_existing_and_conflict_as_the_real_run(
        backend: RunnerQ, run_cli: Any, tmp_path: Path) -> None:
    earlier, twice, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert run_cli("dlq", "import", str(_write(tmp_path / "a.ndjson", [_line(earlier)]))
                   ).code == 0
    lines = [_line(twice), _line(earlier), _line(twice),
             _line(idempotency_key="k", on_duplicate="no-reuse"),
             _line(other), _line(idempotency_key="k", on_duplicate="no-reuse"),
             _line(idempotency_key="k", on_duplicate="allow-reuse-on-failure"),
             _line(other, on_duplicate="return-existing"), _line()]
    path = _write(tmp_path / "b.ndjson", lines)
    for size in ("2", "500"):  # within one batch, and across batches
        dry = run_cli("dlq", "import", str(path), "--dry-run", "--batch-size", size,
                      "-o", "json")
        predicted = [r["outcome"] for r in json.loads(dry.stdout)["results"]]
        assert predicted == ["would_enqueue", "existing", "existing", "would_enqueue",
                             "would_enqueue", "conflict", "conflict", "existing",
                             "would_enqueue"], size
        assert dry.code == 5
    count = backend.context.activities.count_documents({})
    real = run_cli("dlq", "import", str(path), "--batch-size", "2", "-o", "json")
    outcomes = [r["outcome"] for r in json.loads(real.stdout)["results"]]
    assert outcomes == [o.replace("would_enqueue", "enqueued") for o in predicted]
    assert backend.context.activities.count_documents({}) == count + 4
    assert real.code == 5


@pytest.fixture
def counted(settings: Settings) -> Iterator[tuple[QueueContext, Commands]]:
    RunnerQ(settings).maintenance.init_indexes()
    yield from counted_context(settings)


def test_import_costs_at_most_25_commands_per_1000_lines(
        counted: tuple[QueueContext, Commands]) -> None:
    ctx, commands = counted
    audit = AuditLog(ctx)
    queue = ActivityQueue(ctx)
    dlq = DeadLetters(ctx, queue, Operator(ctx, Maintenance(ctx), audit), audit)
    costs = []
    for count in (25, 125):
        lines = (parse_import_line(n, _line(uuid.uuid4())) for n in range(1, count + 1))
        commands.take()
        report = dlq.dlq_import(lines, batch_size=25, collect=False)
        assert report.counts == {"enqueued": count}
        costs.append(len(commands.take()))
    per_batch = (costs[1] - costs[0]) / 4
    assert 0 < per_batch <= 8, costs
    assert per_batch * 1000 / BATCH_SIZE <= 25, costs


@pytest.mark.proof
def test_sigterm_midway_leaves_an_audit_record_and_a_rerun_imports_the_rest_once(
        backend: RunnerQ, cli_env: dict[str, str], run_cli_subprocess: Any,
        tmp_path: Path) -> None:
    ctx = backend.context
    path = _write(tmp_path / "big.ndjson", [_line(uuid.uuid4()) for _ in range(100)])
    args = ("dlq", "import", str(path), "--batch-size", "4", "--reason", "replay", "-q")
    code, out, err = sigterm_after_first_batch(cli_env, args, lambda: _records(ctx))
    assert code == 130, err
    assert "interrupted: dlq import stopped after line" in err and "Traceback" not in err
    assert out.endswith(" enqueued\n") and " lines: " in out
    [record] = _records(ctx)
    done = ctx.activities.count_documents({})
    assert record["detail"]["state"] == "interrupted"
    assert 0 < record["detail"]["count"] == done < 100
    assert record["detail"]["last_line"] == done
    rerun = run_cli_subprocess(*args)
    assert rerun.code == 0, rerun.stderr
    assert ctx.activities.count_documents({}) == 100
    assert len(ctx.activities.distinct("metadata.redriven_from")) == 100
    records = _records(ctx)
    assert [r["detail"]["state"] for r in records] == ["interrupted", "done"]
    assert records[1]["detail"]["count"] == 100 - done
    assert records[1]["detail"]["outcomes"] == {"existing": done, "enqueued": 100 - done}


def test_import_into_a_misspelt_queue_is_refused(backend: RunnerQ, run_cli: Any,
                                                tmp_path: Path) -> None:
    path = _write(tmp_path / "in.ndjson", [_line(uuid.uuid4())])
    before = set(backend.db.list_collection_names())
    res = run_cli("--queue", "test", "dlq", "import", str(path))
    assert res.code == 4 and "did you mean 'tests'?" in res.stderr, res
    assert set(backend.db.list_collection_names()) == before
    made = run_cli("--queue", "staging", "dlq", "import", str(path), "--create")
    assert made.code == 0, made.stderr
    for bad in (("--batch-size", "0"), ("--reason", "a\nb"), ("--actor", "x\x1b[2J")):
        res = run_cli("dlq", "import", str(path), *bad)
        assert res.code == 2 and res.stderr.count("\n") == 1, (bad, res)
    assert backend.context.activities.count_documents({}) == 0

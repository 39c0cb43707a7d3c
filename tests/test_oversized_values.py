"""Every stored value has a bound (backend/domain/sizes.py), enforced where it enters, and a line
that cannot be encoded or stored stops only itself (issue 23 #4 #5).

- API: `ActivitySpec` (and so `enqueue`, `enqueue_many`) raises InvalidArgument naming
  the parameter, never a flag, quoting at most a cut of the value.
- Command line: one `error:` line, exit 2, nothing written.
- `enqueue --from` and `dlq import`: each kind of bad line (an unpaired surrogate in the
  type, a metadata value or key, the idempotency key; a value over its bound; a 17 MB
  value) among good ones is refused alone, with its line number and a cut quote; the
  others are written; the report and `-o json` are whole, exact and small; the exit code
  is the one for rejected lines; a rerun writes nothing twice.
- A batch holds at most INPUT_BATCH_BYTES of lines (plus one), whatever its size in
  lines (memory: benchmarks/bench_enqueue_rss.py).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain import sizes
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.queue.intake import Batcher
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.errors import InvalidArgument

MB = 1024 * 1024
SURROGATE = "\\ud800"  # as a JSON escape: decodes to an unpaired surrogate


def _over(limit: int) -> str:
    return "x" * (limit + 1)


# (parameter named in the error, ActivitySpec keyword arguments)
TOO_BIG: list[tuple[str, dict[str, Any]]] = [
    ("activity_type", {"activity_type": _over(sizes.ACTIVITY_TYPE_MAX)}),
    ("idempotency_key", {"idempotency_key": _over(sizes.IDEMPOTENCY_KEY_MAX_BYTES)}),
    ("idempotency_key", {"idempotency_key": "€" * (sizes.IDEMPOTENCY_KEY_MAX_BYTES // 3 + 1)}),
    ("idempotency_key", {"idempotency_key": "k" * (3 * MB)}),
    ("metadata", {"metadata": {"k": _over(sizes.METADATA_VALUE_MAX_BYTES)}}),
    ("metadata", {"metadata": {"k": "x" * (17 * MB)}}),
    ("metadata", {"metadata": {f"k{i}": "x" * 4000 for i in range(20)}}),  # 80 KB in all
    ("metadata key", {"metadata": {_over(sizes.METADATA_KEY_MAX): "v"}}),
    ("payload", {"payload": {"blob": "x" * (sizes.PAYLOAD_MAX_BYTES + 1)}}),
    ("activity_type", {"activity_type": "t\ud800"}),
    ("idempotency_key", {"idempotency_key": "k\udfff"}),
    ("metadata", {"metadata": {"k": "v\ud800"}}),
    ("metadata key", {"metadata": {"k\ud800": "v"}}),
    ("payload", {"payload": {"s": "\ud800"}}),
]


@pytest.mark.parametrize(("parameter", "options"), TOO_BIG,
                         ids=[f"{p}-{i}" for i, (p, _) in enumerate(TOO_BIG)])
def test_the_api_refuses_naming_the_parameter(parameter: str, options: dict[str, Any]) -> None:
    kwargs = {"activity_type": "t", **options}
    with pytest.raises(InvalidArgument) as caught:
        ActivitySpec(**kwargs)
    message = str(caught.value)
    assert parameter in message and "--" not in message, message
    assert len(message) < 400, message  # the value is quoted cut, never whole


def test_the_bounds_themselves_are_accepted_and_stored(backend: RunnerQ) -> None:
    spec = ActivitySpec("t" * sizes.ACTIVITY_TYPE_MAX, {"n": 1},
                        idempotency_key="€" * (sizes.IDEMPOTENCY_KEY_MAX_BYTES // 3),
                        metadata={"k" * sizes.METADATA_KEY_MAX:
                                  "v" * sizes.METADATA_VALUE_MAX_BYTES})
    result = backend.enqueue(spec)
    stored = backend.get_activity(result.activity_id)
    assert stored.activity_type == spec.activity_type
    assert stored.metadata == dict(spec.metadata)
    assert backend.enqueue(spec).created is False  # the key holds


def test_the_whole_activity_stays_below_mongodb_s_document_limit() -> None:
    small_fields = (sizes.ACTIVITY_TYPE_MAX * 4 + sizes.IDEMPOTENCY_KEY_MAX_BYTES
                    + sizes.METADATA_MAX_BYTES)
    assert small_fields < sizes.HEADROOM // 2
    assert sizes.PAYLOAD_MAX_BYTES + 8 * MB + sizes.HEADROOM <= sizes.BSON_DOCUMENT_MAX


@pytest.mark.parametrize("args", [
    ["enqueue", _over(sizes.ACTIVITY_TYPE_MAX)],
    ["enqueue", "t", "--idempotency-key", _over(sizes.IDEMPOTENCY_KEY_MAX_BYTES)],
    ["enqueue", "t", "--metadata", "k=" + _over(sizes.METADATA_VALUE_MAX_BYTES)],
    ["enqueue", "t", "--metadata", _over(sizes.METADATA_KEY_MAX) + "=v"],
], ids=["type", "key", "metadata value", "metadata key"])
def test_the_command_line_refuses_in_one_line(run_cli: Any, backend: RunnerQ,
                                              args: list[str]) -> None:
    result = run_cli(*args)
    assert result.code == ExitCode.USAGE, result
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert len(result.stderr) < 400
    assert backend.context.activities.count_documents({}) == 0


def test_a_payload_file_over_the_bound_is_refused(run_cli: Any, backend: RunnerQ,
                                                  tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"blob": "x" * (sizes.PAYLOAD_MAX_BYTES + 1)}))
    result = run_cli("enqueue", "t", "--payload", f"@{path}")
    assert result.code == ExitCode.USAGE, result
    assert "payload" in result.stderr and str(sizes.PAYLOAD_MAX_BYTES) in result.stderr
    assert backend.context.activities.count_documents({}) == 0


# ------------------------------------------------------------------ lines of a stream

def _good(n: int, **extra: Any) -> str:
    return json.dumps({"type": "t", "payload": {"n": n}, "idempotency_key": f"k{n}", **extra})


# Each kind of bad line, with the words its reason must have (some written by hand: they
# carry a JSON escape json.dumps would not write).
BAD_LINES: list[tuple[str, str]] = [
    (('{"type": "t' + SURROGATE + '"}'), "activity_type"),
    (('{"type": "t", "metadata": {"k": "v' + SURROGATE + '"}}'), "metadata"),
    (('{"type": "t", "metadata": {"k' + SURROGATE + '": "v"}}'), "metadata key"),
    (('{"type": "t", "idempotency_key": "k' + SURROGATE + '"}'), "idempotency_key"),
    (json.dumps({"type": "t", "idempotency_key": "k" * (3 * MB)}), "idempotency_key"),
    (json.dumps({"type": "t", "metadata": {"k": "x" * (17 * MB)}}), "metadata"),
    (json.dumps({"type": "x" * 1000}), "activity_type"),
    (json.dumps({"type": "t", "payload": {"b": "x" * (sizes.PAYLOAD_MAX_BYTES + 1)}}),
     "payload"),
    (('{"type": "t", "payload": {"s": "' + SURROGATE + '"}}'), "payload"),
]


def _mixed(original: bool = False) -> tuple[str, list[int], list[int]]:
    """Good lines between each bad one: (text, good line numbers, bad line numbers)."""
    lines: list[str] = []
    good: list[int] = []
    bad: list[int] = []
    for index, (line, _) in enumerate(BAD_LINES):
        extra = {"original_id": str(uuid.UUID(int=index + 1))} if original else {}
        lines.append(_good(index, **extra))
        good.append(len(lines))
        lines.append(line)
        bad.append(len(lines))
    extra = {"original_id": str(uuid.UUID(int=999))} if original else {}
    lines.append(_good(999, **extra))
    good.append(len(lines))
    return "".join(line + "\n" for line in lines), good, bad


def _assert_small_exact_report(rejected: list[dict[str, Any]], bad: list[int]) -> None:
    assert [r["line"] for r in rejected] == bad
    for record, (_, word) in zip(rejected, BAD_LINES, strict=True):
        assert word in record["reason"], record
        assert len(record["reason"]) <= 300, record


@pytest.mark.parametrize("output", ["json", "text", "jsonl"])
def test_enqueue_from_refuses_each_bad_line_alone_and_a_rerun_writes_nothing_twice(
        backend: RunnerQ, run_cli: Any, tmp_path: Path, output: str) -> None:
    text, good, bad = _mixed()
    path = tmp_path / "in.ndjson"
    path.write_text(text)
    docs = backend.context.activities
    result = run_cli("enqueue", "--from", str(path), "--batch-size", "4", "-o", output)
    assert result.code == ExitCode.USAGE, result.stderr
    assert len(result.stdout) < 20_000  # 9 rejected lines of up to 17 MB: a small report
    assert result.stderr == f"error: {len(bad)} of {len(good) + len(bad)} lines rejected\n"
    if output == "json":
        summary = json.loads(result.stdout)  # whole: one valid document
        assert [a["line"] for a in summary["activities"]] == good
        assert (summary["lines"], summary["enqueued"], summary["invalid"],
                summary["rejected_not_listed"]) == (len(good) + len(bad), len(good),
                                                    len(bad), 0)
        _assert_small_exact_report(summary["rejected"], bad)
    elif output == "jsonl":
        records = [json.loads(line) for line in result.stdout.splitlines()]
        _assert_small_exact_report(sorted((r for r in records if "kind" in r),
                                          key=lambda r: r["line"]), bad)
        assert sorted(r["line"] for r in records if "id" in r) == good
    else:
        assert result.stdout.startswith(f"enqueued {len(good)} of {len(good) + len(bad)} "
                                        f"lines; {len(bad)} invalid\n")
        assert [int(line.split(":")[0][5:]) for line in result.stdout.splitlines()[1:]] == bad
    assert docs.count_documents({}) == len(good)
    again = run_cli("enqueue", "--from", str(path), "--batch-size", "4", "-o", "json")
    assert again.code == ExitCode.USAGE
    summary = json.loads(again.stdout)
    assert (summary["enqueued"], summary["existing"], summary["invalid"]) == (
        0, len(good), len(bad))
    assert docs.count_documents({}) == len(good)  # nothing written twice


def test_dlq_import_refuses_each_bad_line_alone_and_a_rerun_writes_nothing_twice(
        backend: RunnerQ, run_cli: Any, tmp_path: Path) -> None:
    text, good, bad = _mixed(original=True)
    path = tmp_path / "in.ndjson"
    path.write_text(text)
    docs = backend.context.activities
    result = run_cli("dlq", "import", str(path), "--batch-size", "4", "-o", "json")
    assert result.code == ExitCode.USAGE, result.stderr
    assert len(result.stdout) < 20_000
    summary = json.loads(result.stdout)
    rows = summary["results"]
    assert [r["line"] for r in rows] == sorted(good + bad)
    assert [r["line"] for r in rows if r["outcome"] == "enqueued"] == good
    invalid = [r for r in rows if r["outcome"] == "invalid"]
    for row, (_, word) in zip(invalid, BAD_LINES, strict=True):
        assert word in row["reason"] and len(row["reason"]) <= 300, row
    assert summary["counts"] == {"enqueued": len(good), "invalid": len(bad)}
    again = run_cli("dlq", "import", str(path), "--batch-size", "4", "-o", "json")
    assert json.loads(again.stdout)["counts"] == {"existing": len(good), "invalid": len(bad)}
    assert docs.count_documents({}) == len(good)


def test_a_batch_ends_at_its_byte_cap_whatever_its_size_in_lines() -> None:
    cap = 10
    items = [4, 4, 4, 1, 1, 1, 9, 12, 1]
    batches = list(Batcher(items, size=100, size_of=lambda n: n, max_bytes=cap))
    assert batches == [[4, 4, 4], [1, 1, 1, 9], [12], [1]]
    assert all(sum(b[:-1]) < cap for b in batches)  # held bytes pass the cap by one line


def test_enqueue_lines_writes_big_lines_in_small_batches(backend: RunnerQ) -> None:
    line = json.dumps({"type": "t", "payload": {"blob": "x" * (MB + MB // 2)}}).encode()
    batches: list[int] = []
    report = backend.intake.enqueue_lines(
        [(n, line) for n in range(1, 5)], {}, batch_size=100,
        on_batch=lambda report, done: batches.append(len(done)))
    assert report.enqueued == 4
    assert batches == [3, 1]  # 4.5 MB reach the 4 MiB cap after three lines, not 100


def test_the_line_reader_bounds_its_buffer_and_keeps_line_numbers(tmp_path: Path) -> None:
    """cli/lines.py: a line over the limit comes as None (skipped unread), CRLF and a last
    line without its break are lines, numbers are those of the input."""
    import os

    from runnerq_cli.cli.lines import InputLines, _fd_lines

    path = tmp_path / "in.ndjson"
    data = b"a\r\n" + b"x" * 100_000 + b"\n\nbb\n" + b"y" * 300_000 + b"\nlast"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    into = InputLines(len(data))
    lines = list(enumerate(_fd_lines(fd, 1000, lambda: False, close=True, into=into),
                           start=1))
    assert lines == [(1, b"a"), (2, None), (3, b""), (4, b"bb"), (5, None), (6, b"last")]
    assert into.consumed == len(data) and into.fraction() == 1.0  # the progress line's 100 %

"""Text output at 80 columns keeps every value whole, in one time format (issue 19).

Each text command renders, with COLUMNS=80, a queue holding long activity
types, a long error, a long reason and a long worker id. Tables fit the width
(low-value columns are left out first, the free-text column is cut with …);
wrapped text (doctor, explain, pause) breaks between words only; no value is
split across lines; every time reads `2026-12-01 05:05:17.503Z`; no Python
literal (`None`, `True`, `['a']`) reaches a person.
"""

from __future__ import annotations

import re

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.cli.tables import Column, layout, unique_prefixes

WIDTH = 80
TYPE = "send_email_to_every_customer"
OTHER = "resize_image_thumbnails"
WORKER = "worker-host-abcdef-1234abcd"
ERROR = ("SMTP server at mail.example.com refused the connection: 421 too many "
         "connections from this host, try later")
REASON = "the mail relay is down for maintenance until noon"
TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
ONE_FORMAT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z")
PYTHON = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|\['|\{'|\+00:00")


@pytest.fixture
def busy(settings, cli_env) -> dict[str, object]:
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    pending = [rq.enqueue(TYPE, {"n": n}, metadata={"team": "billing"}).activity_id
               for n in range(3)]
    scheduled = rq.enqueue(OTHER, {}, delay_seconds=600).activity_id
    claim = rq.dequeue(WORKER, types=[TYPE])[0]
    rq.ack_failure(claim, ERROR, retryable=False)
    rq.registry.register_worker(WORKER, types=[TYPE, OTHER], concurrency=8)
    pending.remove(claim.activity_id)
    return {"pending": pending, "failed": claim.activity_id, "scheduled": scheduled}


def _run(run_cli, *args: str) -> list[str]:
    res = run_cli(*args, env={"COLUMNS": str(WIDTH)})
    assert res.code in (0, 7), (args, res.stderr)
    return res.stdout.splitlines()


def _whole(lines: list[str], *values: str) -> None:
    for value in values:
        assert any(value in line for line in lines), (value, lines)


def _times_and_words(lines: list[str]) -> None:
    text = "\n".join(lines)
    for match in TIME.findall(text):
        assert ONE_FORMAT.fullmatch(match), (match, text)
    assert not PYTHON.findall(text), (PYTHON.findall(text), text)


def _fits(lines: list[str]) -> None:
    assert all(len(line) <= WIDTH for line in lines), [ln for ln in lines if len(ln) > WIDTH]


def test_tables_fit_and_keep_values_whole(busy, run_cli) -> None:
    prefixes = [str(a)[:8] for a in busy["pending"]]
    for status, ids, values in (("pending", prefixes, [TYPE]),
                                ("failed", [str(busy["failed"])[:8]], [TYPE, "SMTP server"]),
                                ("scheduled", [str(busy["scheduled"])[:8]], [OTHER])):
        lines = _run(run_cli, "list", status)
        _fits(lines)
        _whole(lines, *ids, *values)
        _times_and_words(lines)
        assert len(lines) == 1 + len(ids)  # a header and one line per activity
    workers = _run(run_cli, "workers")
    _fits(workers)
    _whole(workers, WORKER, "0/8", "live", f"{TYPE},…")  # types cut after a whole one
    assert len(workers) == 2
    queues = _run(run_cli, "queues")
    _fits(queues)
    _whole(queues, "pending", "oldest pending", "1 live")


def test_event_lines_one_per_event_in_one_time_format(busy, run_cli) -> None:
    failed = str(busy["failed"])
    events = _run(run_cli, "events", failed)
    assert [line.split()[2] for line in events] == ["Enqueued", "Dequeued", "Started", "Failed"]
    _whole(events, ERROR, WORKER, failed[:8])
    _times_and_words(events)
    tail = _run(run_cli, "tail", "events", "--no-follow", "--since", "1h")
    assert len(tail) == 3 + 1 + 3  # every event one line: enqueued, scheduled, the claim
    _times_and_words(tail)
    show = _run(run_cli, "show", failed[:8])
    _whole(show, failed, ERROR)
    _times_and_words(show)


def test_the_event_column_holds_the_longest_event_name(queue, run_cli) -> None:
    """`show` and `tail events` line their events up: the activity id starts in the same
    column on every line, `ResultStored` and `PriorityChanged` included (a column of 11
    let `ResultStored` push its line one to the right)."""
    from runnerq_cli.backend.domain.event_types import EventType
    from runnerq_cli.cli.eventfmt import event_width

    assert event_width() == max(len(kind.value) for kind in EventType) == 15
    done = queue.enqueue("charge", {}).activity_id
    queue.ack_success(queue.dequeue("w", types=["charge"])[0], {"ok": 1})
    other = queue.enqueue("report", {}).activity_id
    assert run_cli("set-priority", str(other), "high", "--yes").code == 0
    for args, longest in ((("show", str(done)), "ResultStored"),
                          (("events", str(other)), "PriorityChanged"),
                          (("tail", "events", "--no-follow"), "PriorityChanged")):
        lines = [ln for ln in _run(run_cli, *args) if ONE_FORMAT.match(ln)]
        assert longest in {ln.split()[2] for ln in lines}, (args, lines)
        id_starts = {ln.index(ln.split()[3]) for ln in lines}  # the short id, or (queue)
        assert id_starts == {len("2026-12-01 00:00:00.000Z  ") + 15 + 1}, (args, lines)


def test_wrapped_text_breaks_between_words(busy, run_cli) -> None:
    paused = _run(run_cli, "pause", "--type", TYPE, "--reason", REASON, "--actor", "ana")
    _fits(paused)
    _whole(paused, TYPE)
    _times_and_words(paused)
    assert " ".join(" ".join(paused).split()).endswith(f"by ana ({REASON})")
    for aid in (busy["failed"], busy["pending"][0]):
        explain = _run(run_cli, "explain", str(aid))
        _fits(explain)
        _whole(explain, str(aid), TYPE)
        _times_and_words(explain)
        assert any(line.strip() == "paused: yes" for line in explain) or \
            aid == busy["failed"]
    doctor = _run(run_cli, "doctor")
    _fits(doctor)
    _times_and_words(doctor)
    indexes = _run(run_cli, "init-indexes", "--dry-run")  # every index there: one line
    _fits(indexes)
    assert len(indexes) == 1 and indexes[0].endswith(" present")
    audit = _run(run_cli, "audit")
    _fits(audit)
    _whole(audit, TYPE)
    _times_and_words(audit)
    assert f"reason='{REASON}'" in " ".join(" ".join(audit).split()), audit


def test_layout_drops_columns_before_cutting_and_never_splits() -> None:
    columns = [Column("id"), Column("type"), Column("extra", drop=1), Column("note",
                                                                            flexible=True)]
    rows = [["3f0c2a9e", TYPE, "x" * 30, ERROR]]
    lines = ["".join(text for text, _ in line) for line in layout(columns, rows, WIDTH)]
    assert all(len(line) <= WIDTH for line in lines)
    assert "extra" not in lines[0] and TYPE in lines[1] and lines[1].endswith("…")
    assert layout(columns, rows, 400)[0][4][0].startswith("extra")  # room enough: kept


def test_unique_prefixes_grow_only_as_needed() -> None:
    ids = ["aaaaaaaa-1111-4000-8000-000000000001", "aaaaaaaa-2222-4000-8000-000000000002",
           "bbbbbbbb-1111-4000-8000-000000000003"]
    assert unique_prefixes(ids[2:]) == {ids[2]: "bbbbbbbb"}
    assert set(unique_prefixes(ids).values()) == {"aaaaaaaa-1", "aaaaaaaa-2", "bbbbbbbb-1"}


def test_local_time_is_a_choice(busy, run_cli_subprocess) -> None:
    utc = run_cli_subprocess("list", "pending", env={"TZ": "Asia/Kolkata"})
    local = run_cli_subprocess("--local", "list", "pending", env={"TZ": "Asia/Kolkata"})
    assert utc.code == local.code == 0, (utc.stderr, local.stderr)
    assert ONE_FORMAT.search(utc.stdout) and "+05:30" not in utc.stdout
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\+05:30", local.stdout)


def test_a_cut_text_fills_its_room_and_a_cut_list_ends_after_a_whole_name() -> None:
    columns = [Column("id"), Column("last error", flexible=True)]
    lines = ["".join(text for text, _ in line)
             for line in layout(columns, [["3f0c2a9e", ERROR]], 40)]
    assert lines[1] == "3f0c2a9e  SMTP server at mail.example.c…"
    columns = [Column("id"), Column("types", flexible=True, names=True)]
    lines = ["".join(text for text, _ in line)
             for line in layout(columns, [["w1", f"{TYPE},{OTHER}"]], 40)]
    assert lines[1] == f"w1  {TYPE},…"


def test_config_show_keeps_short_values_aligned_within_80(run_cli) -> None:
    lines = _run(run_cli, "config", "show")
    long = [line for line in lines if len(line) > WIDTH]
    assert [line.split()[0] for line in long] in ([], ["uri"])  # only a long URI's own line
    assert any(line.split()[:3] == ["lease", "1m", "default"] for line in lines)


def test_an_event_line_on_a_terminal_is_cut_between_fields() -> None:
    import io
    import uuid
    from datetime import UTC, datetime

    from rich.console import Console

    from runnerq_cli.backend.domain.documents import Event
    from runnerq_cli.cli.eventfmt import event_line

    event = Event(id=1, activity_id=uuid.uuid4(), timestamp=datetime(2026, 12, 1, tzinfo=UTC),
                  event_type="Failed", worker_id=WORKER, detail={"error": ERROR},
                  activity_type=TYPE)
    screen = io.StringIO()
    Console(file=screen, width=WIDTH, force_terminal=True, color_system=None).print(
        event_line(event))
    # the error is what a Failed line is read for: the type gives way, the error is cut
    assert screen.getvalue().splitlines() == [
        f"2026-12-01 00:00:00.000Z  Failed          {str(event.activity_id)[:8]}  "
        "error=SMTP server at mail.e…"]
    piped = io.StringIO()
    Console(file=piped, width=WIDTH, no_color=True, soft_wrap=True).print(event_line(event))
    assert piped.getvalue().splitlines() == [event_line(event).plain]
    assert piped.getvalue().rstrip("\n").endswith(f"error={ERROR}  worker={WORKER}")

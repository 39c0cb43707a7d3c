"""Untrusted text is shown as text, in every text command (issue 16, class 1).

A catalogue of hostile strings (markup, CSI and OSC sequences, newline, CR,
NUL, a right-to-left override, a 5,000-character string) is written where
another program or operator could put it: activity types, last errors,
metadata, worker ids and hosts, event details, pause reasons and actors,
audit records. Documents the CLI would refuse are written with pymongo. Each
text command must exit 0 and print the escaped form: no raw control
character reaches the screen and no markup takes effect (the tags are shown).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from bson import ObjectId

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.literal import literal

HOSTILE = [
    "disk [/] full",
    "[red]red[/red]",
    "[link=http://evil.example]see runbook[/link]",
    "clear\x1b[2Jscreen",
    "title\x1b]0;pwned\x07",
    "two\nlines",
    "carriage\rreturn",
    "nul\x00byte",
    "rtl\u202eevil",
    "long" + "x" * 5000,
]
SHORT = HOSTILE[:-1]  # the long one is cut in some views; the others are shown whole
# Anything a terminal would act on: C0 (but the line feeds that end lines), DEL, C1,
# bidi controls.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                 "\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def hostile(settings) -> dict[str, object]:
    """A queue where every field that reaches a screen holds a hostile string."""
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    coll = rq.context
    now = datetime.now(UTC).replace(microsecond=0)
    ids = []
    for n, text in enumerate(HOSTILE):
        aid = rq.enqueue("job", {"text": text}).activity_id
        coll.activities.update_one({"_id": aid}, {"$set": {
            # (a type has at most 200 characters: a longer one is malformed, design.md)
            "activity_type": text[:200], "last_error": text, "metadata": {"tag": text},
            "worker_id": text, "created_at": now - timedelta(minutes=n)}})
        ids.append(aid)
        coll.events.insert_one({
            "_id": ObjectId(), "activity_id": aid, "activity_type": text,
            "event_type": "Failed", "timestamp": now, "ingested_at": now, "worker_id": text,
            "detail": {"error": text, "started_at": now, "previous_scheduled_at": None}})
        coll.workers.insert_one({
            "_id": f"w{n}-{text}", "host": text, "pid": 1, "queue": settings.queue,
            "types": [text], "concurrency": 1, "started_at": now, "last_heartbeat": now,
            "in_flight": 0, "counters": {}, "version": "x"})
    for text in HOSTILE:
        coll.events.insert_one({
            "_id": ObjectId(), "activity_id": None, "activity_type": None,
            "event_type": "OperatorAction", "timestamp": now, "ingested_at": now,
            "worker_id": "operator",
            "detail": {"action": "cancel", "count": 1, "ids": [str(ids[0])], "reason": text,
                       "actor": text, "types": [text]}})
    coll.control.replace_one({"_id": "pause"}, {
        "_id": "pause", "all": False, "types": ["other", *SHORT], "reason": HOSTILE[2],
        "actor": HOSTILE[3], "at": now}, upsert=True)
    return {"ids": ids, "rq": rq}


def _clean(result, *, shown: list[str] | None = None) -> None:
    assert result.code == 0, result.stderr
    for stream in (result.stdout, result.stderr):
        assert not RAW.findall(stream), RAW.findall(stream)[:5]
    for text in shown or []:
        assert literal(text) in result.stdout, (text, result.stdout[:2000])


def test_list_prints_types_and_errors_escaped(hostile, run_cli) -> None:
    res = run_cli("list", "pending")
    _clean(res, shown=SHORT)
    assert "[link=http://evil.example]see runbook[/link]" in res.stdout  # no markup effect
    assert "\\x1b[2J" in res.stdout and "\\u202e" in res.stdout and "\\n" in res.stdout


@pytest.mark.parametrize("n", range(len(HOSTILE)))
def test_show_and_events_print_every_field_escaped(hostile, run_cli, n) -> None:
    aid = str(hostile["ids"][n])
    text = HOSTILE[n]
    show = run_cli("show", aid)
    _clean(show, shown=[text] if text in SHORT else [])
    events = run_cli("events", aid)
    _clean(events, shown=[text] if text in SHORT else [])
    assert "None" not in events.stdout  # a detail with no value is left out
    as_json = run_cli("events", aid, "-o", "jsonl").stdout.splitlines()
    assert len(events.stdout.splitlines()) == len(as_json) == 2  # one event, one line
    explain = run_cli("explain", aid)
    _clean(explain, shown=[text] if text in SHORT else [])


def test_workers_queues_doctor_audit_escaped(hostile, run_cli) -> None:
    _clean(run_cli("workers"), shown=SHORT)
    _clean(run_cli("queues"))
    doctor = run_cli("doctor")
    assert doctor.code in (0, 7), doctor.stderr
    assert not RAW.findall(doctor.stdout + doctor.stderr)
    audit = run_cli("audit")
    _clean(audit, shown=SHORT)
    # A newline in an actor or reason can never forge a second audit record: a record
    # starts at the margin with its time, a folded record's later lines are indented.
    lines = audit.stdout.splitlines()
    starts = [line for line in lines if not line.startswith(" ")]
    assert len(starts) == len(HOSTILE), lines
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z  ", line)
               for line in starts), starts


def test_tail_text_lines_escaped(hostile, run_cli) -> None:
    res = run_cli("tail", "events", "--no-follow", "--since", "1d")
    _clean(res, shown=SHORT)
    assert len(res.stdout.splitlines()) >= len(HOSTILE)


def test_pause_and_resume_print_reason_and_actor_escaped(hostile, run_cli) -> None:
    res = run_cli("pause", "--type", "more")
    _clean(res, shown=[HOSTILE[2], HOSTILE[3]])
    assert "[link=http://evil.example]" in res.stdout
    _clean(run_cli("resume", "--type", "more"))


def test_json_output_keeps_the_exact_text(hostile, run_cli) -> None:
    import json

    res = run_cli("show", str(hostile["ids"][3]), "-o", "json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["activity"]["activity_type"] == HOSTILE[3]


def test_error_lines_escape_what_they_quote_back(run_cli) -> None:
    res = run_cli("show", "\x1b[2J\u202e")
    assert res.code == 2
    assert not RAW.findall(res.stderr)
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1


def test_enqueue_output_escapes_rejected_lines(run_cli, tmp_path) -> None:
    path = tmp_path / "jobs.ndjson"
    path.write_text('{"type": "ok", "payload": {}}\n{"type": "\\u001b[2J", "payload": 5}\n')
    res = run_cli("enqueue", "--from", str(path))
    assert res.code in (0, 2), res.stderr
    assert not RAW.findall(res.stdout + res.stderr)


def test_an_unknown_prefix_is_not_found(hostile, run_cli) -> None:
    missing = next(h for h in ("00000000", "ffffffff")
                   if not any(str(i).startswith(h) for i in hostile["ids"]))
    assert run_cli("show", missing).code == 4
    assert uuid.UUID(str(hostile["ids"][0]))


def test_a_text_result_keeps_its_lines_and_escapes_the_rest(settings, run_cli) -> None:
    rq = RunnerQ(settings)
    aid = rq.enqueue("job", {}).activity_id
    rq.ack_success(rq.dequeue("w1")[0], "line one\nline two \x1b[2J\u202e")
    for args in (["result", str(aid)], ["wait", str(aid)]):
        res = run_cli(*args)
        assert res.code == 0, res.stderr
        assert res.stdout == "line one\nline two \\x1b[2J\\u202e\n"


def test_init_indexes_prints_index_names_escaped(settings, run_cli) -> None:
    rq = RunnerQ(settings)
    rq.maintenance.init_indexes()
    rq.context.activities.create_index([("zz", 1)], name="evil\x1b[2J[red]x\u202e")
    res = run_cli("init-indexes")
    _clean(res, shown=["evil\x1b[2J[red]x\u202e"])


def test_config_show_prints_file_values_escaped(run_cli, tmp_path) -> None:
    path = tmp_path / "runnerq.yaml"
    path.write_text('worker:\n  app: "my\\e[2J[red]app\\u202e"\n')
    _clean(run_cli("--config", str(path), "config", "show"), shown=["my\x1b[2J[red]app\u202e"])

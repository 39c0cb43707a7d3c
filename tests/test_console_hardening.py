"""The console under attack (issue 33): each reproduction of the hostile run, as a test.

A page the console did not write may not act and runs no stored text; data that
reaches RunnerQ's routes carries no markup; worker ids are ids. (The browser's
side of these is in tests/test_console_hostile_browser.py.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.console.app import ConsoleConfig, serve
from runnerq_cli.errors import InvalidArgument
from tests.test_console_api import Console


@pytest.fixture
def console(backend: RunnerQ) -> Iterator[Console]:
    c = Console(backend)
    yield c
    c.close()


MARKUP = '<img src=x onerror="fetch(\'/api/actions/pause\')">'


def _activity(aid: Any, status: str = "pending", **fields: Any) -> dict[str, Any]:
    return {"_id": aid, "activity_type": "job", "payload": {}, "priority": 2,
            "status": status, "created_at": datetime.now(UTC), "retry_count": 0,
            "max_retries": 3, "timeout_seconds": 60, "retry_delay_seconds": 1, **fields}


# ------------------------------------------------------------------ a page we did not write


def test_ui_with_allow_actions_is_refused_at_start(run_cli: Any, tmp_path: Any,
                                                   backend: RunnerQ) -> None:
    page = tmp_path / "runnerq-console.html"
    page.write_text("<html></html>")
    refused = run_cli("console", "--ui", str(page), "--allow-actions", "--port", "0")
    assert refused.code == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--ui" in refused.stderr \
        and "--allow-actions" in refused.stderr
    with pytest.raises(InvalidArgument):  # the library's own callers too
        serve(backend, ConsoleConfig(port=0, ui=b"<html></html>", allow_actions=True))


def test_a_ui_page_runs_only_its_own_scripts_and_handlers(backend: RunnerQ) -> None:
    page = (b"<html><script>window.ok = 1;</script>"
            b"<button onclick=\"sortBy('status')\">s</button>"
            b"<script>el.innerHTML = `<b onclick=\"copy('${id}')\">`;</script></html>")
    c = Console(backend, ui=page)
    try:
        csp = c.request("GET", "/")[1]["Content-Security-Policy"]
    finally:
        c.close()
    script = csp.split("script-src ")[1].split(";")[0].split()
    assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script
    # two scripts and the one fixed handler, by hash; the handler made from data is not
    assert "'unsafe-hashes'" in script
    assert len([s for s in script if s.startswith("'sha256-")]) == 3
    assert "form-action 'none'" in csp and "frame-ancestors 'none'" in csp


def test_runnerq_lists_keep_out_ids_that_are_not_uuids(console: Console,
                                                        backend: RunnerQ) -> None:
    good = uuid.uuid4()
    activities = backend.context.activities
    activities.insert_many([_activity(MARKUP), _activity(good)])
    code, headers, body = console.request("GET", "/api/observability/activities/pending")
    listed = json.loads(body)
    assert code == 200 and [a["id"] for a in listed] == [str(good)]
    assert headers["X-RunnerQ-Skipped"] == "1"  # counted, not silently lost
    assert b"onerror" not in body


def test_runnerq_shapes_carry_no_worker_id_or_event_type_that_is_markup(
        console: Console, backend: RunnerQ) -> None:
    aid = uuid.uuid4()
    backend.context.activities.insert_one(_activity(aid, "processing", worker_id=MARKUP,
                                                    started_at=datetime.now(UTC)))
    backend.context.events.insert_many([
        {"_id": uuid.uuid4().hex, "activity_id": aid, "timestamp": datetime.now(UTC),
         "ingested_at": datetime.now(UTC), "event_type": MARKUP, "worker_id": "w-1",
         "detail": {}},
        {"_id": uuid.uuid4().hex, "activity_id": aid, "timestamp": datetime.now(UTC),
         "ingested_at": datetime.now(UTC), "event_type": "Started", "worker_id": MARKUP,
         "detail": {}}])
    (running,) = console.get("/api/observability/activities/processing")
    assert running["current_worker_id"] is None and running["last_worker_id"] is None
    events = console.get(f"/api/observability/activities/{aid}/events")
    assert MARKUP not in json.dumps(events)
    assert {"event_type": "Started", "worker_id": None} in [
        {k: e[k] for k in ("event_type", "worker_id")} for e in events]
    # our own routes show everything, as data (JSON-escaped): nothing is hidden there
    assert console.get(f"/api/activity/{aid}")["activity"]["worker_id"] == MARKUP


# ------------------------------------------------------------------ worker ids


@pytest.mark.parametrize("bad", [MARKUP, "w 1", "w\u202e1", "", "x" * 129, "w'1", 'w"1'])
def test_a_worker_id_is_the_characters_an_id_needs(bad: str, backend: RunnerQ) -> None:
    with pytest.raises(InvalidArgument, match="worker id"):
        backend.registry.register_worker(bad)
    assert backend.context.workers.count_documents({}) == 0


def test_worker_id_refused_at_the_command_line(run_cli: Any) -> None:
    refused = run_cli("worker", "--worker-id", MARKUP, "--exec", "job=true", "--burst")
    assert refused.code == 2 and refused.stderr.count("\n") == 1
    assert "--worker-id" in refused.stderr and "letters, digits" in refused.stderr
    assert "Traceback" not in refused.stderr

"""Named queries (backend/domain/queries.py): what doctor explains is what the code sends.

Each code path runs against the server with the driver boundary recording every
filter, sort and pipeline it sends; every query `doctor` checks must be among
them, equal in filter and order. A query the code built inline, drifting from
the one doctor vouches for, fails here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.event_cursor import EventCursor
from runnerq_cli.backend.domain.models import Status
from runnerq_cli.backend.domain.queries import representative_queries
from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.backend.store import cursors, driver

Sent = tuple[str, Any, Any]  # collection, filter or pipeline, sort


@pytest.fixture
def sent(monkeypatch) -> list[Sent]:
    """Every query the backend sends through driver.py while the test runs."""
    log: list[Sent] = []
    entries: dict[int, int] = {}  # id(cursor) -> its entry in the log

    def sorted_by(sort: Any) -> tuple[tuple[str, int], ...]:
        return tuple(tuple(s) for s in sort) if sort else ()

    def recording(name: str) -> None:
        original = getattr(driver.Collection, name)

        def method(self, filter=None, *args, **kwargs):
            log.append((self.name, filter, sorted_by(kwargs.get("sort"))))
            return original(self, filter, *args, **kwargs)
        monkeypatch.setattr(driver.Collection, name, method)

    for name in ("find_one", "find_one_and_update", "update_many", "count_documents",
                 "delete_many"):
        recording(name)
    original_find, original_sort = driver.Collection.find, cursors.Cursor.sort
    original_aggregate = driver.Collection.aggregate

    def find(self, filter=None, *args, **kwargs):
        cursor = original_find(self, filter, *args, **kwargs)
        log.append((self.name, filter or {}, ()))
        entries[id(cursor)] = len(log) - 1
        return cursor

    def sort(self, key, direction=None):
        entry = entries.get(id(self))
        if entry is not None and not isinstance(key, str):
            log[entry] = (*log[entry][:2], sorted_by(key))
        return original_sort(self, key, direction)

    def aggregate(self, pipeline, **kwargs):
        log.append((self.name, list(pipeline), ()))
        return original_aggregate(self, pipeline, **kwargs)

    from runnerq_cli.backend.queue import maintenance

    original_statements = maintenance.update_many_statements

    def statements(collection, updates):  # the scheduler's two updates in one command
        for query, _ in updates:
            log.append((collection.name, query, ()))
        return original_statements(collection, updates)

    monkeypatch.setattr(maintenance, "update_many_statements", statements)
    monkeypatch.setattr(driver.Collection, "find", find)
    monkeypatch.setattr(cursors.Cursor, "sort", sort)
    monkeypatch.setattr(driver.Collection, "aggregate", aggregate)
    return log


def _run_every_code_path(queue: RunnerQ, now: datetime) -> None:
    queue.dequeue("w")
    queue.dequeue("w", types=list(queries.SAMPLE_TYPES))
    for kind in queries.SAMPLE_TYPES:  # the claim around paused types names what is there
        queue.enqueue(kind, {})
    queue.dequeue("w", exclude_types=list(queries.SAMPLE_PAUSED))
    queue.process_scheduled()
    queue.durable.wake([queries.SAMPLE_ACTIVITY])
    queue.requeue_expired()
    queue.maintenance.repair_outboxes()  # its default grace, as doctor's sample
    queue.maintenance.purge_expired()
    for status in queries.LIST_ORDERS:
        queue.inspector.list_page(status)
    queue.stats()
    queue.inspector.stats_snapshot()
    queue.diagnosis.summary()
    queue.get_activity_events(queries.SAMPLE_ACTIVITY)
    queue.list_dead_letter()
    queue.registry.count_live_workers(TIMING.worker_stale_after)
    queue.schedules.fire_due()
    queue.inspector.failures_by_type_and_error(
        since=now - timedelta(seconds=queries.FAILURES_SAMPLE))
    from runnerq_cli.backend.diagnosis.queue_checks import check_timeouts

    check_timeouts(queue.context, now)  # doctor's live leases, read at its `now`
    # One read of a tail positioned where doctor's sample tail reads from.
    start = now - timedelta(seconds=queries.TAIL_BEHIND_SAMPLE)
    list(queue.event_stream(cursor=EventCursor(mark=start), follow=False))
    _run_a_limited_claim(queue)


def _run_a_limited_claim(queue: RunnerQ) -> None:
    """A limited type found full of a stale holder (repaired), then claimed by its key."""
    from runnerq_cli.backend.ops.limits import make_limits

    kind = queries.SAMPLE_TYPES[0]
    queue.limits.set(make_limits(kind, concurrency=1))
    queue.context.limits.update_one({"_id": kind}, {"$push": {"holders": {
        "l": "0" * 32, "k": "", "w": "gone", "until": datetime(2000, 1, 1, tzinfo=UTC)}}})
    queue.enqueue(ActivitySpec(kind, {}, key="k"))
    queue.dequeue("w", types=[kind])


@pytest.mark.parametrize("partitions", [1])  # one partition's queries
def test_every_query_doctor_checks_is_the_one_the_code_sends(queue: RunnerQ, clock,
                                                             sent: list[Sent]) -> None:
    assert queue.settings.retention_completed > 0 and queue.settings.retention_failed > 0
    now = clock()
    _run_every_code_path(queue, now)
    checked = representative_queries(queue.settings, now)
    assert len(checked) >= 30
    for query in checked:
        collection = queue.context.names.all()[query.role]
        if query.pipeline is not None:
            wanted: Sent = (collection, list(query.pipeline), ())
            assert wanted in sent, (query.name, wanted)
        else:
            # A find, or an aggregation that starts with the query's match and sort.
            head = [query.match_stage, *([query.sort_stage] if query.sort else [])]
            assert (collection, query.filter, query.sort) in sent or any(
                c == collection and isinstance(p, list) and p[:len(head)] == head
                for c, p, _ in sent), (query.name, query.filter, query.sort)


@pytest.mark.parametrize("partitions", [1])  # one partition's queries
def test_the_code_paths_are_recorded_so_the_check_can_fail(queue: RunnerQ, sent: list[Sent],
                                                           clock) -> None:
    """A filter the code does not send is not found: the comparison above means something."""
    _run_every_code_path(queue, clock())
    activities = queue.context.names.activities
    assert (activities, {"status": Status.PENDING.value}, queries.CLAIM_ORDER) in sent
    assert (activities, {"status": "pending", "activity_type": "x"},
            queries.CLAIM_ORDER) not in sent


@pytest.mark.parametrize("partitions", [1])  # one partition's queries
def test_doctor_explains_the_named_queries(queue: RunnerQ, clock, monkeypatch) -> None:
    """The plan check explains exactly representative_queries(), in order, one each."""
    from runnerq_cli.backend.diagnosis import queue_checks

    explained: list[str] = []

    def explain(db, names, settings, query) -> dict[str, Any]:
        explained.append(query.name)
        return {}

    monkeypatch.setattr(queue_checks, "explain_query", explain)
    monkeypatch.setattr(queue_checks, "plan_stages", lambda answer: ["FETCH", "IXSCAN"])
    check = next(c for c in queue.diagnosis.doctor(server=False) if c.name == "query plans")
    assert explained == [q.name for q in representative_queries(queue.settings, clock())]
    assert check.facts["served"] == explained

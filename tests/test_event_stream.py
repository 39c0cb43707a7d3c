"""EventStream / EventCursor: order, --since and --resume exactness, late outbox flushes,
the polling path, and the change-stream path on a server that offers it (nx-27017)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from bson import ObjectId

from runnerq_cli.backend.domain.event_cursor import EventCursor, EventFilter
from runnerq_cli.backend.views.events import EventStream
from runnerq_cli.errors import InvalidArgument
from tests.nx_fixtures import nx_server
from tests.waiting import wait_until


def drain(queue, cursor=None, **kw):
    stream = queue.event_stream(cursor=cursor, follow=False, **kw)
    events = list(stream)
    return events, stream.cursor


def insert_event(queue, stamp, event_type="Enqueued", ingested=None):
    """An event as another writer would copy it out (its own ingested_at)."""
    doc = {"_id": ObjectId(), "activity_id": None, "activity_type": "x", "timestamp": stamp,
           "event_type": event_type, "worker_id": None, "detail": {},
           "ingested_at": ingested or stamp}
    queue.context.events.insert_one(doc)
    return doc["_id"]


def test_events_in_order_with_fields(queue, clock):
    aid = queue.enqueue("email", {"to": "a"}).activity_id
    clock.advance(1)
    [claim] = queue.dequeue("w1")
    clock.advance(1)
    queue.ack_success(claim, {"ok": True})
    events, _ = drain(queue)
    assert [e.event_type for e in events] == ["Enqueued", "Dequeued", "Started", "Completed",
                                              "ResultStored"]
    assert all(e.activity_id == aid and e.activity_type == "email" for e in events)
    assert events[1].worker_id == "w1"
    assert all(e.ingested_at is not None for e in events)
    stamps = [e.timestamp for e in events]
    assert stamps == sorted(stamps)


def test_resume_neither_loses_nor_repeats(queue, clock):
    for i in range(3):
        queue.enqueue("a", {"i": i})
        clock.advance(0.01)
    first, cursor = drain(queue)
    assert len(first) == 3
    text = cursor.encode()
    # Written while the consumer was stopped, some within the settle window of the cursor.
    for i in range(3, 6):
        queue.enqueue("a", {"i": i})
        clock.advance(0.01)
    again, cursor2 = drain(queue, EventCursor.decode(text))
    assert [e.id for e in again] == [e.id for e in drain(queue)[0][3:]]
    assert {e.id for e in again}.isdisjoint({e.id for e in first})
    # Nothing new: resuming again yields nothing.
    assert drain(queue, EventCursor.decode(cursor2.encode()))[0] == []


def test_late_insert_inside_settle_window_is_delivered_once(queue, clock):
    now = clock()
    a = insert_event(queue, now)
    b = insert_event(queue, now + timedelta(seconds=1))
    events, cursor = drain(queue)
    assert [e.id for e in events] == [a, b]
    # A slower writer's event becomes visible now, stamped behind the high-water mark.
    late = insert_event(queue, now + timedelta(milliseconds=500))
    events2, cursor = drain(queue, EventCursor.decode(cursor.encode()))
    assert [e.id for e in events2] == [late]
    assert drain(queue, cursor)[0] == []


def test_since_is_exact_on_event_time(queue, clock):
    base = clock()
    ids = [insert_event(queue, base + timedelta(seconds=i)) for i in range(5)]
    since = base + timedelta(seconds=2)
    events, _ = drain(queue, EventCursor.starting_at(since))
    assert [e.id for e in events] == ids[2:]


def test_events_held_in_an_outbox_appear_once_flushed(queue, clock):
    before, cursor = drain(queue)
    assert before == []
    with queue.buffered_outbox(size=100):
        aid = queue.enqueue("a", {}, max_retries=1).activity_id
        queue.ack_failure(queue.dequeue("w")[0], "boom")  # dead-lettered; its event buffered
        # Derived steps show at once; the stored DeadLetter only once it is copied out,
        # though the activity's own view shows it from the outbox.
        shown, cursor = drain(queue, EventCursor.decode(cursor.encode()))
        assert [e.event_type for e in shown] == ["Enqueued", "Dequeued", "Started"]
        assert queue.get_activity_events(aid)[0].event_type == "DeadLetter"
        clock.advance(5)  # flushed later than the settle window: still seen (ingested_at)
    events, _ = drain(queue, EventCursor.decode(cursor.encode()))
    assert [(e.event_type, e.activity_id) for e in events] == [("DeadLetter", aid)]


def test_many_events_sharing_one_flush_stamp_page_without_loss(queue, clock):
    with queue.buffered_outbox(size=1000):
        for i in range(12):
            queue.enqueue("a", {"i": i})
            clock.advance(0.001)
    stream = queue.event_stream(follow=False)
    stream.batch_size = 5
    events = list(stream)
    assert len(events) == 12 and len({e.id for e in events}) == 12
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events)


def test_filters(queue, clock):
    a = queue.enqueue("a", {}).activity_id
    queue.enqueue("b", {})
    [claim] = queue.dequeue("w9", types=["a"])
    queue.ack_failure(claim, "x", retryable=False)
    got = lambda f: [e.event_type for e in drain(queue, filters=f)[0]]  # noqa: E731
    assert got(EventFilter(activity_types=("b",))) == ["Enqueued"]
    assert got(EventFilter(event_types=("Failed",))) == ["Failed"]
    assert got(EventFilter(activity_id=a)) == ["Enqueued", "Dequeued", "Started", "Failed"]
    assert got(EventFilter(worker_id="w9")) == ["Dequeued", "Started", "Failed"]


def offers_change_streams(server) -> bool:
    """A real MongoDB replica set or sharded cluster (hello's setName, or a mongos):
    where the tail must follow by change stream. A standalone mongod refuses them
    (40573) and the dev server lacks them: polling there."""
    if not server.real_mongodb:
        return False
    from pymongo import MongoClient

    with MongoClient(server.uri, serverSelectionTimeoutMS=5000) as client:
        hello = client.admin.command("hello")
    return "setName" in hello or hello.get("msg") == "isdbgrid"


def test_follow_polling_sees_new_events_and_stops(queue, server):
    stream = queue.event_stream(mode="auto", poll_interval=0.05)
    seen = []

    def consume():
        for event in stream:
            seen.append(event)
            if len(seen) == 2:
                stream.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    queue.enqueue("a", {})
    wait_until(lambda: seen, message="the stream to deliver the first event")
    queue.enqueue("b", {})  # written after the stream delivered "a": it must follow
    thread.join(timeout=20)
    assert not thread.is_alive()
    # Auto picks the change stream wherever the server offers one (issue 32: the public
    # workflow's replica sets and mongos), and polls elsewhere (a standalone, the dev server).
    assert stream.mode == ("change-stream" if offers_change_streams(server) else "poll")
    # Two enqueues may share a millisecond: their order is then stable but unspecified.
    assert sorted(e.activity_type for e in seen) == ["a", "b"]
    assert all(e.event_type == "Enqueued" for e in seen)


def test_bad_cursor_and_mode():
    with pytest.raises(InvalidArgument):
        EventCursor.decode("garbage")
    with pytest.raises(InvalidArgument):
        EventStream(None, mode="sideways")  # type: ignore[arg-type]


def test_cursor_roundtrip_keeps_ids_and_floor():
    cursor = EventCursor.starting_at(EventCursor().ingested_at + timedelta(days=1))
    cursor.seen["abc"] = cursor.ingested_at
    back = EventCursor.decode(cursor.encode())
    assert back == cursor


# --------------------------------------------------- change streams on nx-27017


__all__ = ["nx_server"]  # a fixture, used by name


def test_change_stream_path_on_nx(nx_server):
    """nx-27017 accepts watch(): auto mode picks the change stream, history then live
    inserts arrive once each, in order, with their fields (UUIDs come back as bytes there)."""
    from pymongo import MongoClient

    client = MongoClient(nx_server, uuidRepresentation="standard", tz_aware=True)
    try:
        events = client["rq_nx"]["runnerq_nx_events"]
        from runnerq_cli.backend.store.context import utc_now

        def put(kind: str) -> ObjectId:
            now = utc_now()
            oid = ObjectId()
            events.insert_one({"_id": oid, "activity_id": None, "activity_type": "t",
                               "timestamp": now, "event_type": kind, "worker_id": "w",
                               "detail": {"k": kind}, "ingested_at": now})
            return oid

        history = put("Enqueued")
        stream = EventStream(events, mode="auto", poll_interval=0.05)
        seen: list = []

        def consume():
            for event in stream:
                seen.append(event)
                if len(seen) == 3:
                    stream.stop()

        thread = threading.Thread(target=consume)
        thread.start()
        wait_until(lambda: seen, message="the stream to deliver the history")
        live = [put("Started"), put("Completed")]
        thread.join(timeout=30)
        stream.stop()
        assert not thread.is_alive()
        assert stream.mode == "change-stream"
        assert [e.id for e in seen] == [history, *live]
        assert [e.event_type for e in seen] == ["Enqueued", "Started", "Completed"]
        assert seen[2].detail == {"k": "Completed"} and seen[2].worker_id == "w"
        # Resuming from the cursor after the stream: nothing repeats.
        again = list(EventStream(events, cursor=EventCursor.decode(stream.cursor.encode()),
                                 mode="poll", follow=False))
        assert again == []
    finally:
        client.close()


def test_a_cursor_that_would_inflate_without_bound_is_refused():
    import base64
    import zlib

    bomb = "ec" + base64.urlsafe_b64encode(zlib.compress(b"[" * (64 * 1024 * 1024), 9)
                                           ).decode().rstrip("=")
    with pytest.raises(InvalidArgument):
        EventCursor.decode(bomb)
    # A cursor whose offsets are absurd (hand-edited): refused, not an OverflowError.
    absurd = json.dumps({"v": 2, "t": "2026-01-01T00:00:00+00:00", "f": None,
                         "s": [["x", 10**30]]}).encode()
    with pytest.raises(InvalidArgument):
        EventCursor.decode("ec" + base64.urlsafe_b64encode(zlib.compress(absurd)).decode())


# ------------------------------------- positions stamped by the server (issue 18)


def test_a_cursor_of_the_previous_version_resumes(queue, clock):
    """A version-2 cursor (high-water mark `t`, ids within 2 s behind it) still resumes:
    its window becomes the mark, its ids are not printed again."""
    import base64
    import zlib

    a = insert_event(queue, clock())
    b = insert_event(queue, clock() + timedelta(milliseconds=10))
    old = {"v": 2, "t": (clock() + timedelta(milliseconds=10)).isoformat(), "f": None,
           "s": [[str(a), -10], [str(b), 0]]}
    text = "ec" + base64.urlsafe_b64encode(zlib.compress(json.dumps(old).encode())).decode()
    cursor = EventCursor.decode(text)
    assert cursor.mark == clock() + timedelta(milliseconds=10) - timedelta(seconds=2)
    c = insert_event(queue, clock() + timedelta(milliseconds=20))
    assert [e.id for e in drain(queue, cursor)[0]] == [c]


def test_a_cursor_of_a_newer_version_is_refused_with_a_clear_message():
    import base64
    import zlib

    raw = zlib.compress(json.dumps({"v": 9, "m": "2026-01-01T00:00:00+00:00"}).encode())
    with pytest.raises(InvalidArgument, match="newer version"):
        EventCursor.decode("ec" + base64.urlsafe_b64encode(raw).decode())


def test_a_position_from_a_clock_running_ahead_does_not_hide_later_events(queue, clock):
    """A foreign writer stamping an hour ahead: the mark stays behind the server's clock,
    so events positioned now are still delivered."""
    ahead = insert_event(queue, clock() + timedelta(hours=1))
    events, cursor = drain(queue)
    assert [e.id for e in events] == [ahead]
    now = insert_event(queue, clock())
    assert [e.id for e in drain(queue, EventCursor.decode(cursor.encode()))[0]] == [now]


def test_positions_are_the_servers_whatever_the_writers_clock(backend, settings):
    """A writer whose clock is 30 s behind (or that chose its time 30 s before its write
    landed): created_at, started_at, completed_at and a stored event's ingested_at (and
    timestamp) are the server's time of the write, so a tail following by position sees
    them now."""
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.views.events import server_time
    from tests.chaos_support import LaggingClock

    stalled = RunnerQ(settings, clock=LaggingClock(30))
    cols = backend.context
    before = server_time(cols.events)
    aid = stalled.enqueue("late", {}).activity_id
    [claim] = stalled.dequeue("w")
    stalled.ack_success(claim, 1)
    failing = stalled.enqueue("late", {}, max_retries=3).activity_id
    stalled.ack_failure(stalled.dequeue("w")[0], "boom")
    doc = cols.activities.find_one({"_id": aid})
    for name in ("created_at", "started_at", "completed_at"):
        assert doc[name] >= before - timedelta(seconds=1), name
    stored = list(cols.events.find({"activity_id": failing}))
    assert stored and all(e["ingested_at"] >= before - timedelta(seconds=1) for e in stored)
    retrying = next(e for e in stored if e["event_type"] == "Retrying")
    # Not a position, but the server's time too (set by $$NOW: design.md, "Time").
    assert retrying["timestamp"] >= before - timedelta(seconds=1)


def test_started_reads_the_same_live_and_in_history(queue, clock):
    """One event, one content: the live tail's Started (while running) equals the one the
    history shows after the attempt ended, both derived and materialized."""
    aid = queue.enqueue("a", {}, max_retries=3, retry_delay_seconds=0).activity_id
    claim = queue.dequeue("w")[0]
    live = {e.id: e for e in drain(queue)[0] if e.event_type == "Started"}
    assert [e.detail for e in live.values()] == [{"attempt": 1}]
    queue.ack_failure(claim, "boom")  # materializes the attempt's steps
    clock.advance(2)
    queue.ack_success(queue.dequeue("w")[0], "ok")
    history = [e for e in queue.get_activity_events(aid) if e.event_type == "Started"]
    again = {e.id: e for e in history}
    for event_id, event in live.items():
        assert again[event_id] == event
    tail = [e for e in drain(queue)[0] if e.event_type == "Started"]
    assert sorted(tail, key=lambda e: str(e.id)) == sorted(history, key=lambda e: str(e.id))


def test_cursor_file_journal_after_the_snapshot():
    from runnerq_cli.cli.cursorfile import journal_line, read_cursor_file

    when = EventCursor().mark + timedelta(days=20000, milliseconds=5)
    text = "ecSNAPSHOT\n" + journal_line("a1", when).decode() + "+b2 17"  # cut short
    snapshot, entries = read_cursor_file(text)
    assert snapshot == "ecSNAPSHOT" and entries == [("a1", when)]


def test_change_stream_tail_sees_a_lagging_writers_enqueue_on_nx(nx_server):
    """The change-stream path (nx-27017): an enqueue by a writer whose clock is 30 s
    behind is delivered, positioned by the server's stamp."""
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.config import Settings
    from tests.chaos_support import LaggingClock

    settings = Settings(uri=nx_server, database="rq_nx_lag", queue="nx")
    writer = RunnerQ(settings, clock=LaggingClock(30))
    reader = RunnerQ(settings)
    stream = reader.event_stream(mode="change-stream",
                                 cursor=reader.inspector.event_cursor_at_end(),
                                 poll_interval=0.05)
    seen: list = []

    def consume():
        for event in stream:
            seen.append(event)
            if len(seen) == 2:
                stream.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        writer.enqueue("lagging", {"n": 1})
        writer.enqueue("lagging", {"n": 2})
        thread.join(timeout=30)
    finally:
        stream.stop()
    assert not thread.is_alive() and stream.mode == "change-stream"
    assert [e.event_type for e in seen] == ["Enqueued", "Enqueued"]


def test_change_stream_tail_wakes_for_the_queues_own_records_on_nx(nx_server, monkeypatch):
    """A pause or an operator action is a record of the queue (activity_id null) that
    changes no activity: the activities' stream says nothing of it, the events' second
    stream wakes the tail (with the idle read a minute away, only that stream can)."""
    from pymongo import MongoClient

    import runnerq_cli.backend.views.events as events_module
    from runnerq_cli.backend.store.context import utc_now

    monkeypatch.setattr(events_module, "IDLE_READ_EVERY", 120.0)
    client = MongoClient(nx_server, uuidRepresentation="standard", tz_aware=True)
    stream = None
    try:
        db = client["rq_nx_records"]
        events, activities = db["runnerq_nx_events"], db["runnerq_nx_activities"]
        activities.insert_one({"_id": "placeholder", "status": "completed"})  # it exists
        stream = EventStream(events, activities=activities, mode="change-stream",
                             poll_interval=0.05)
        seen: list = []

        def consume() -> None:
            for event in stream:
                seen.append(event)
                stream.stop()

        thread = threading.Thread(target=consume)
        thread.start()
        wait_until(lambda: stream.reads >= 1, message="the tail's first read")
        now = utc_now()
        record = ObjectId()
        events.insert_one({"_id": record, "activity_id": None, "activity_type": None,
                           "timestamp": now, "event_type": "Paused", "worker_id": "operator",
                           "detail": {"types": ["t"]}, "ingested_at": now})
        wait_until(lambda: seen, timeout=30, message="the record, woken by its stream")
        thread.join(timeout=30)
        assert [e.id for e in seen] == [record]
    finally:
        if stream is not None:
            stream.stop()
        client.close()

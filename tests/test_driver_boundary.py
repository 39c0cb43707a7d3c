"""The one driver boundary (backend/store/driver.py): every way to MongoDB a backend part has
translates driver errors, so a part called directly is as safe as the facade."""

from __future__ import annotations

import uuid

import pytest
from pymongo.errors import PyMongoError

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.store import cursors, driver
from runnerq_cli.cli.exits import ExitCode, exit_code_of
from runnerq_cli.config import load_settings
from runnerq_cli.errors import DuplicateKey, TooLarge, Unavailable, WriteUnconfirmed

REFUSED = "mongodb://u:secret@127.0.0.1:1/?directConnection=true"


@pytest.fixture
def nowhere() -> RunnerQ:
    """A backend whose server refuses every connection."""
    settings = load_settings(None, overrides={"uri": REFUSED, "database": "d", "queue": "q",
                                              "server_selection_timeout": 0.3},
                             environ={"RUNNERQ_CONFIG": ""})
    return RunnerQ(settings)


CALLS = {
    "facade enqueue": lambda rq: rq.enqueue("job", {}),
    "part enqueue": lambda rq: rq.activities.enqueue("job", {}),
    "part dequeue": lambda rq: rq.activities.dequeue("w"),
    "part scheduler": lambda rq: rq.process_scheduled(),
    "part reaper": lambda rq: rq.requeue_expired(),
    "part list": lambda rq: rq.inspector.list_page("pending"),
    "part show": lambda rq: rq.inspector.get_activity(uuid.uuid4()),
    "part workers": lambda rq: rq.registry.list_workers(),
    "part paused": lambda rq: rq.control.paused(),
    "part audit": lambda rq: rq.audit_log.audit(),
    "part dlq export (iterated)": lambda rq: list(rq.dead_letters.dlq_export()),
    "part discovery": lambda rq: rq.diagnosis.discover_queues(),
    "part explain": lambda rq: rq.diagnosis.explain(uuid.uuid4()),
    "context collection": lambda rq: rq.context.activities.find_one({}),
    "context cursor (iterated)": lambda rq: list(rq.context.events.find({}).limit(1)),
    "database command": lambda rq: rq.db.command("ping"),
    "server command": lambda rq: rq.db.admin_command("hello"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_way_in_raises_unavailable_with_the_password_hidden(nowhere: RunnerQ,
                                                                 name: str) -> None:
    with pytest.raises(Unavailable) as caught:
        CALLS[name](nowhere)
    assert "127.0.0.1:1" in str(caught.value) and "secret" not in str(caught.value)


def test_the_context_hands_out_only_translated_collections(queue: RunnerQ) -> None:
    ctx = queue.context
    assert isinstance(ctx.db, driver.Database) and queue.db is ctx.db
    for role in ctx.names.all():
        assert isinstance(ctx.collection(role), driver.Collection)
    assert isinstance(ctx.activities.find({}), cursors.Cursor)
    assert not hasattr(queue, "collections")  # the old alias of context is gone


def test_a_duplicate_key_is_our_own_error_with_its_code(queue: RunnerQ) -> None:
    """A refused write reaches a part (and so an API caller) as our kind, not pymongo's."""
    queue.context.results.insert_one({"_id": "same"})
    with pytest.raises(DuplicateKey) as caught:
        queue.context.results.insert_one({"_id": "same"})
    assert caught.value.code == 11000 and caught.value.refusals[0]["index"] == 0
    assert not isinstance(caught.value, PyMongoError)


def test_a_batch_names_each_refused_write_by_its_index(queue: RunnerQ) -> None:
    queue.context.results.insert_one({"_id": "held"})
    with pytest.raises(DuplicateKey) as caught:
        queue.context.results.insert_many([{"_id": "new"}, {"_id": "held"}], ordered=False)
    assert [r["index"] for r in caught.value.refusals] == [1]
    assert queue.context.results.count_documents({"_id": "new"}) == 1


def test_a_document_over_the_size_limit_is_too_large(queue: RunnerQ) -> None:
    with pytest.raises(TooLarge):
        queue.context.results.insert_one({"_id": "big", "data": "x" * (17 * 1024 * 1024)})
    assert queue.context.results.count_documents({}) == 0


def test_the_cli_maps_each_refusal_to_its_exit_code() -> None:
    assert exit_code_of(DuplicateKey("held", 11000)) == ExitCode.CONFLICT
    assert exit_code_of(TooLarge("big")) == ExitCode.USAGE
    assert exit_code_of(WriteUnconfirmed("w:5")) == ExitCode.UNAVAILABLE

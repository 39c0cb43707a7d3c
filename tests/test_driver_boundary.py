"""The one driver boundary (backend/driver.py): every way to MongoDB a backend part has
translates driver errors, so a part called directly is as safe as the facade."""

from __future__ import annotations

import uuid

import pytest

from runnerq_cli.backend import driver
from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.config import load_settings
from runnerq_cli.errors import Unavailable

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
    assert isinstance(ctx.activities.find({}), driver.Cursor)
    assert not hasattr(queue, "collections")  # the old alias of context is gone


def test_errors_that_are_the_caller_s_pass_through(queue: RunnerQ) -> None:
    """A duplicate key is not a connection problem: the driver's own error reaches the part."""
    from pymongo.errors import DuplicateKeyError

    queue.context.results.insert_one({"_id": "same"})
    with pytest.raises(DuplicateKeyError):
        queue.context.results.insert_one({"_id": "same"})

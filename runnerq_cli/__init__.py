"""runnerq-mongo: MongoDB storage for the RunnerQ activity queue, and its CLI.

Public API (loaded lazily so that `runnerq-mongo --help` stays fast)::

    from runnerq_cli import connect, ActivitySpec, Priority

    queue = connect("mongodb://localhost:27017", queue="emails")
    queue.enqueue("send_email", {"to": "a@example.com"}, priority=Priority.HIGH)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from runnerq_cli.version import __version__ as __version__

# The public names, by the module that defines them: loaded on first access (__getattr__).
# Type checkers read the same names from the imports below.
_MODULES: dict[str, tuple[str, ...]] = {
    "runnerq_cli.backend.api": ("RunnerQ", "connect"),
    "runnerq_cli.backend.domain.specs": ("ActivitySpec",),
    "runnerq_cli.backend.domain.models": (
        "AckOutcome", "EnqueueResult", "OnDuplicate", "Priority", "Status",
    ),
    "runnerq_cli.backend.domain.documents": ("Activity", "Claim", "Event", "Result"),
    "runnerq_cli.backend.domain.event_cursor": ("EventCursor", "EventFilter"),
    "runnerq_cli.config": ("Settings", "load_settings"),
    "runnerq_cli.errors": (
        "ClaimLost", "ConfigError", "DuplicateActivity", "IdempotencyConflict", "InvalidArgument",
        "NotFound", "RunnerQError", "Unavailable",
    ),
    "runnerq_cli.worker.api": (
        "ActivityContext", "ChildFailed", "ChildHandle", "DurableContext",
        "DurableContractError", "HandlerRegistry", "NonRetryableError", "RetryableError",
        "SignalTimeout", "StepFailed", "Worker", "WorkerEnd", "create_worker", "handler",
        "run_worker",
    ),
    "runnerq_cli.backend.traits": ("InspectionBackend", "QueueBackend"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the same names, for type checkers (explicit re-exports)
    # isort: off
    from runnerq_cli.backend.api import (
        RunnerQ as RunnerQ, connect as connect,
    )
    from runnerq_cli.backend.domain.documents import (
        Activity as Activity, Claim as Claim, Event as Event, Result as Result,
    )
    from runnerq_cli.backend.domain.event_cursor import (
        EventCursor as EventCursor, EventFilter as EventFilter,
    )
    from runnerq_cli.backend.domain.models import (
        AckOutcome as AckOutcome, EnqueueResult as EnqueueResult, OnDuplicate as OnDuplicate,
        Priority as Priority, Status as Status,
    )
    from runnerq_cli.backend.domain.specs import (
        ActivitySpec as ActivitySpec,
    )
    from runnerq_cli.backend.traits import (
        InspectionBackend as InspectionBackend, QueueBackend as QueueBackend,
    )
    from runnerq_cli.config import (
        Settings as Settings, load_settings as load_settings,
    )
    from runnerq_cli.errors import (
        ClaimLost as ClaimLost, ConfigError as ConfigError, DuplicateActivity as DuplicateActivity,
        IdempotencyConflict as IdempotencyConflict, InvalidArgument as InvalidArgument,
        NotFound as NotFound, RunnerQError as RunnerQError, Unavailable as Unavailable,
    )
    from runnerq_cli.worker.api import (
        ActivityContext as ActivityContext, ChildFailed as ChildFailed,
        ChildHandle as ChildHandle, DurableContext as DurableContext,
        DurableContractError as DurableContractError, SignalTimeout as SignalTimeout,
        StepFailed as StepFailed, HandlerRegistry as HandlerRegistry,
        NonRetryableError as NonRetryableError, RetryableError as RetryableError, Worker as Worker,
        WorkerEnd as WorkerEnd, create_worker as create_worker, handler as handler,
        run_worker as run_worker,
    )
    # isort: on

def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runnerq_cli' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

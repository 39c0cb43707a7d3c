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

_EXPORTS = {
    "connect": "runnerq_cli.backend.api",
    "RunnerQ": "runnerq_cli.backend.api",
    "ActivitySpec": "runnerq_cli.backend.queue",
    "Activity": "runnerq_cli.backend.models",
    "Claim": "runnerq_cli.backend.models",
    "EnqueueResult": "runnerq_cli.backend.models",
    "Result": "runnerq_cli.backend.models",
    "Event": "runnerq_cli.backend.models",
    "Priority": "runnerq_cli.backend.models",
    "Status": "runnerq_cli.backend.models",
    "OnDuplicate": "runnerq_cli.backend.models",
    "AckOutcome": "runnerq_cli.backend.models",
    "EventCursor": "runnerq_cli.backend.events",
    "EventFilter": "runnerq_cli.backend.events",
    "Settings": "runnerq_cli.config",
    "load_settings": "runnerq_cli.config",
    "RunnerQError": "runnerq_cli.errors",
    "InvalidArgument": "runnerq_cli.errors",
    "ConfigError": "runnerq_cli.errors",
    "NotFound": "runnerq_cli.errors",
    "ClaimLost": "runnerq_cli.errors",
    "DuplicateActivity": "runnerq_cli.errors",
    "IdempotencyConflict": "runnerq_cli.errors",
    "Unavailable": "runnerq_cli.errors",
    "Worker": "runnerq_cli.worker.api",
    "HandlerRegistry": "runnerq_cli.worker.api",
    "handler": "runnerq_cli.worker.api",
    "NonRetryableError": "runnerq_cli.worker.api",
    "RetryableError": "runnerq_cli.worker.api",
    "ActivityContext": "runnerq_cli.worker.api",
    "create_worker": "runnerq_cli.worker.api",
    "run_worker": "runnerq_cli.worker.api",
}

__all__ = [
    "AckOutcome",
    "Activity",
    "ActivitySpec",
    "Claim",
    "ClaimLost",
    "ConfigError",
    "DuplicateActivity",
    "EnqueueResult",
    "Event",
    "EventCursor",
    "EventFilter",
    "IdempotencyConflict",
    "InvalidArgument",
    "NotFound",
    "OnDuplicate",
    "Priority",
    "Result",
    "RunnerQ",
    "RunnerQError",
    "Settings",
    "Status",
    "Unavailable",
    "connect",
    "load_settings",
]
__all__ += ["ActivityContext", "HandlerRegistry", "NonRetryableError", "RetryableError",
            "Worker", "create_worker", "handler", "run_worker"]

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ, connect
    from runnerq_cli.backend.events import EventCursor, EventFilter
    from runnerq_cli.backend.models import (
        AckOutcome,
        Activity,
        Claim,
        EnqueueResult,
        Event,
        OnDuplicate,
        Priority,
        Result,
        Status,
    )
    from runnerq_cli.backend.queue import ActivitySpec
    from runnerq_cli.config import Settings, load_settings
    from runnerq_cli.errors import (
        ClaimLost,
        ConfigError,
        DuplicateActivity,
        IdempotencyConflict,
        InvalidArgument,
        NotFound,
        RunnerQError,
        Unavailable,
    )
    from runnerq_cli.worker.api import (
        ActivityContext,
        HandlerRegistry,
        NonRetryableError,
        RetryableError,
        Worker,
        create_worker,
        handler,
        run_worker,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runnerq_cli' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

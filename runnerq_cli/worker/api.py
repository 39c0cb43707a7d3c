"""The embedding API: run the same worker inside an application.

    from runnerq_cli import HandlerRegistry, NonRetryableError, run_worker

    registry = HandlerRegistry()

    @registry.handler("resize_image")
    async def resize(payload, ctx):
        ...
        return {"ok": True}

    run_worker(registry, uri="mongodb://db1,db2/?replicaSet=rs0", queue="images",
               concurrency=8)

`Worker` gives finer control (`start()` in a background thread, `stop()`). Pass
`all_types=True` with a catch-all handler (`registry.add("*", func)`) to claim every
activity type; by default a worker claims only the types it has handlers for.
Logs are `logging` records on `runnerq.worker` and `runnerq.backend`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from runnerq_cli.worker.durable import (
    ChildFailed,
    ChildHandle,
    DurableContractError,
    SignalTimeout,
    StepFailed,
)
from runnerq_cli.worker.durable_context import DurableContext
from runnerq_cli.worker.engine import Worker, WorkerEnd
from runnerq_cli.worker.handlers import (
    ActivityContext,
    HandlerRegistry,
    NonRetryableError,
    RetryableError,
    default_registry,
    handler,
    load_app,
    load_function,
    make_handler,
)
from runnerq_cli.worker.shell import EXIT_NON_RETRYABLE, shell_handler

if TYPE_CHECKING:
    from runnerq_cli.backend.traits import WorkerBackend

__all__ = ["EXIT_NON_RETRYABLE", "ActivityContext", "ChildFailed", "ChildHandle",
           "DurableContext", "DurableContractError", "HandlerRegistry", "NonRetryableError",
           "RetryableError", "SignalTimeout", "StepFailed", "Worker", "WorkerEnd",
           "create_worker", "handler", "run_worker"]


def create_worker(registry: HandlerRegistry | None = None, *, backend: WorkerBackend | None = None,
                  uri: str | None = None, database: str | None = None, queue: str | None = None,
                  handlers: Mapping[str, str] | None = None,
                  commands: Mapping[str, str] | None = None, app: str | None = None,
                  **options: Any) -> Worker:
    """A `Worker` for a registry (default: what `@handler` registered), optionally
    extended with import paths (`handlers`) and shell commands (`commands`).

    Connection settings come from `backend`, else uri/database/queue, the
    environment and the config file, like the CLI. `options` are `Worker`'s.
    """
    if backend is None:  # connected as any user of the library does: the public name
        from runnerq_cli import connect

        backend = connect(uri, database=database, queue=queue)
    combined = build_registry(app=app, handlers=handlers, commands=commands,
                              registry=registry if registry is not None else default_registry,
                              queue=backend.queue, secrets=(backend.settings.uri,))
    return Worker(backend, combined, **options)


def run_worker(registry: HandlerRegistry | None = None, **kwargs: Any) -> WorkerEnd:
    """Create a worker and run it in this thread until stopped; returns how it ended."""
    return create_worker(registry, **kwargs).run()


def build_registry(*, app: str | None = None, handlers: Mapping[str, str] | None = None,
                   commands: Mapping[str, str] | None = None,
                   registry: HandlerRegistry | None = None, queue: str | None = None,
                   secrets: Iterable[str] = ()) -> HandlerRegistry:
    """One registry from an app module, import paths and shell commands (later wins).

    Shell commands get `queue` as RUNNERQ_QUEUE and never see the `secrets`
    (the worker's connection strings): see worker/shell.py."""
    out = HandlerRegistry()
    if registry is not None:
        out.update(registry)
    if app:
        out.update(load_app(app))
    for activity_type, path in (handlers or {}).items():
        out.add(activity_type, make_handler(activity_type, load_function(path), path))
    for activity_type, command in (commands or {}).items():
        out.add(activity_type, shell_handler(activity_type, command, queue=queue,
                                             secrets=secrets))
    return out

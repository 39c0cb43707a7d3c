"""Handlers: how a worker knows what to run for an activity type.

A handler is a plain or `async def` function taking the payload (and,
optionally, an `ActivityContext`) and returning a JSON-serialisable result.
Raising `NonRetryableError` fails the activity for good; any other exception
is a retryable failure. Handlers are registered on a `HandlerRegistry`, with
its decorator, by import path (`TYPE=package.module:function`), or as shell
commands (`shell.py`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    import uuid

    from runnerq_cli.backend.domain.models import EnqueueResult


class NonRetryableError(Exception):
    """Raise from a handler to fail the activity without retrying it."""


class RetryableError(Exception):
    """Raise to fail this attempt with exactly this message as `last_error` (retried).

    Any other exception is retryable too; its `last_error` is "Type: message".
    """


class HandlerTimeout(RetryableError):
    """The attempt ran past the activity's `timeout_seconds` (a retryable failure)."""


@dataclass
class ActivityContext:
    """What a handler knows about the attempt it runs, and what it may do."""

    activity_id: uuid.UUID
    activity_type: str
    attempt: int  # 1 for the first attempt
    metadata: dict[str, str]
    worker_id: str
    timeout_seconds: float
    _extend: Callable[[float | None], bool] = field(repr=False, default=lambda s: False)
    _enqueue: Callable[..., EnqueueResult] | None = field(repr=False, default=None)
    # Set when the attempt must stop (timeout, lost claim, cancel, shutdown): should_stop.
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    # Set when an operator cancelled the activity while it ran: `cancelled`.
    cancel_seen: threading.Event = field(default_factory=threading.Event, repr=False)
    # Where a checked progress report goes (the worker's lease keeper writes it).
    _progress: Callable[[dict[str, Any]], None] | None = field(repr=False, default=None)
    kill_grace: float = 5.0  # a shell handler's time between SIGTERM and SIGKILL

    def extend_lease(self, seconds: float | None = None) -> bool:
        """Push the lease deadline to now + `seconds` (default: the worker's lease).

        The worker already renews leases on its own; call this only to ask for
        a longer lease. False once this attempt has ended or lost its claim.
        """
        return self._extend(seconds)

    def enqueue(self, activity_type: str, payload: Mapping[str, Any] | None = None,
                **options: Any) -> EnqueueResult:
        """Enqueue a follow-up activity on the same queue (options as `RunnerQ.enqueue`)."""
        if self._enqueue is None:
            raise RuntimeError("this context cannot enqueue")
        return self._enqueue(activity_type, payload or {}, **options)

    async def enqueue_async(self, activity_type: str, payload: Mapping[str, Any] | None = None,
                            **options: Any) -> EnqueueResult:
        """`enqueue` for an `async def` handler: the same call (counted in the worker's
        metrics alike) on a thread of its own, so the loop runs on during its round trip."""
        import asyncio

        return await asyncio.to_thread(self.enqueue, activity_type, payload, **options)

    @property
    def should_stop(self) -> bool:
        """True once the attempt timed out, lost its claim, was cancelled or the worker is
        shutting down: a long handler may check it and return early."""
        return self.stopping.is_set()

    @property
    def cancelled(self) -> bool:
        """True once the worker learnt that an operator cancelled this activity while it
        ran (at its next lease renewal or progress write: docs/workers.md, "Cancelling
        running work"). Its result will be refused: return early, cleaning up."""
        return self.cancel_seen.is_set()

    def progress(self, done: float, total: float | None = None,
                 message: str | None = None) -> None:
        """Report how far the attempt got (shown by `show`, `list processing`, the tail
        and the console). Cheap to call often: nothing is written here; the worker
        writes the latest report at most once per `worker.progress_interval`, and the
        last one before the attempt's outcome. Bad values (negative, not finite, a
        message over 200 characters or not one line) raise InvalidArgument."""
        from runnerq_cli.backend.domain.progress import progress_document

        report = progress_document(done, total, message)
        if self._progress is not None:
            self._progress(report)


@dataclass(frozen=True)
class Handler:
    """A registered handler and how to call it."""

    activity_type: str
    func: Callable[..., Any]
    is_async: bool
    takes_context: bool
    kind: str = "python"  # "python" | "shell"
    source: str = ""

    def describe(self) -> str:
        return self.source or f"{self.func.__module__}:{getattr(self.func, '__qualname__', '?')}"


def _takes_context(func: Callable[..., Any]) -> bool:
    """True unless the function accepts exactly one positional argument (the payload)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2


def make_handler(activity_type: str, func: Callable[..., Any], source: str = "") -> Handler:
    if not callable(func):
        raise InvalidArgument(f"handler for {activity_type!r} is not callable: {func!r}")
    is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None))  # noqa: B004 - async callable objects too
    return Handler(activity_type, func, is_async, _takes_context(func), "python", source)


# The catch-all handler's type: it runs every type without a handler of its own, and
# only for a worker started with `all_types` (`--all-types`), the one that claims all.
CATCH_ALL = "*"


class HandlerRegistry:
    """Activity type → handler. Use its decorator in your app module::

        from runnerq_cli import HandlerRegistry, NonRetryableError

        registry = HandlerRegistry()

        @registry.handler("send_email")
        def send_email(payload, ctx):
            ...
            return {"sent": True}
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def handler(self, activity_type: str | Callable[..., Any] | None = None
                ) -> Callable[..., Any]:
        """Decorator: `@registry.handler("type")`, or bare `@registry.handler` (the
        function's name is the type)."""
        if callable(activity_type):
            func = activity_type
            self.add(func.__name__, func)
            return func

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            self.add(activity_type or func.__name__, func)
            return func

        return decorate

    def add(self, activity_type: str, func: Callable[..., Any] | Handler,
            source: str = "") -> None:
        if not activity_type or not isinstance(activity_type, str):
            raise InvalidArgument("an activity type must be a non-empty string")
        self._handlers[activity_type] = (func if isinstance(func, Handler)
                                         else make_handler(activity_type, func, source))

    def update(self, other: HandlerRegistry) -> None:
        self._handlers.update(other._handlers)

    def get(self, activity_type: str) -> Handler | None:
        """The handler of this type, else the catch-all (`"*"`), else None."""
        found = self._handlers.get(activity_type)
        return found if found is not None else self._handlers.get(CATCH_ALL)

    @property
    def types(self) -> list[str]:
        """The types with a handler of their own (not the catch-all): what a worker claims."""
        return sorted(t for t in self._handlers if t != CATCH_ALL)

    @property
    def catch_all(self) -> Handler | None:
        """The handler registered as `"*"`, if any."""
        return self._handlers.get(CATCH_ALL)

    def __contains__(self, activity_type: object) -> bool:
        return activity_type in self._handlers

    def __len__(self) -> int:
        return len(self._handlers)

    def items(self) -> Iterable[tuple[str, Handler]]:
        return self._handlers.items()


# The module-level registry behind `runnerq_cli.handler`, for apps that prefer
# a bare decorator to a registry object of their own.
default_registry = HandlerRegistry()


def handler(activity_type: str | Callable[..., Any] | None = None) -> Callable[..., Any]:
    """`@handler("type")` registers on the default registry (see `HandlerRegistry`)."""
    return default_registry.handler(activity_type)


def _importable_cwd() -> None:
    """Like `python -m`, let `--app`/`--handler` find modules in the current directory."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _module_hint(module_name: str) -> str:
    """For a file path given where a module is expected (`examples/app.py`), the module
    name to give instead."""
    if not (module_name.endswith(".py") or "/" in module_name or os.sep in module_name):
        return ""
    path = module_name.removesuffix(".py").replace(os.sep, "/").strip("/")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or module_name.startswith("/"):
        return "; give a module name (package.module), not a file path"
    return f"; give the module's name, not its file: {'.'.join(parts)!r} (from this directory)"


def _import(module_name: str, what: str) -> Any:
    _importable_cwd()
    try:
        return importlib.import_module(module_name)
    except (ImportError, TypeError, ValueError) as exc:
        # TypeError: a relative name (`.mod`, `../a.py`) without a package.
        raise InvalidArgument(f"{what}: cannot import module {module_name!r}: {exc}"
                              f"{_module_hint(module_name)}") from None


def load_function(path: str) -> Callable[..., Any]:
    """`package.module:function` (or `package.module:Class.method`) → the callable."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgument(f"handler {path!r}: expected package.module:function")
    target: Any = _import(module_name, f"handler {path!r}")
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidArgument(f"handler {path!r}: module {module_name!r} has no "
                                  f"{attr!r}") from None
    if not callable(target):
        raise InvalidArgument(f"handler {path!r} is not callable")
    func: Callable[..., Any] = target
    return func


def load_app(module_name: str) -> HandlerRegistry:
    """Import an app module and collect what it registers: every `HandlerRegistry`
    among its globals, plus whatever it put on the default registry."""
    module = _import(module_name, f"app {module_name!r}")
    found = HandlerRegistry()
    for value in vars(module).values():
        if isinstance(value, HandlerRegistry) and value is not default_registry:
            found.update(value)
    found.update(default_registry)
    if not len(found):
        raise InvalidArgument(f"app {module_name!r} registers no handlers (use a "
                              "HandlerRegistry or the runnerq_cli.handler decorator)")
    return found


def parse_assignment(text: str, what: str) -> tuple[str, str]:
    """`TYPE=value` → (TYPE, value)."""
    activity_type, sep, value = text.partition("=")
    if not sep or not activity_type.strip() or not value.strip():
        raise InvalidArgument(f"{what} {text!r}: expected TYPE=VALUE")
    return activity_type.strip(), value.strip()

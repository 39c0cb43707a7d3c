"""Per-invocation state: global options, and the settings and backend built from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.producer import Producer
    from runnerq_cli.config import Settings


@dataclass
class CliState:
    config_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    _settings: Settings | None = None
    _backend: RunnerQ | None = None
    _warned: bool = False

    def settings(self, **extra: Any) -> Settings:
        """Effective settings (flags > env > file > defaults); one-line ConfigError if bad."""
        if self._settings is None or extra:
            from runnerq_cli.config import load_settings

            settings = load_settings(self.config_path, overrides={**self.overrides, **extra})
            if not self._warned:
                from runnerq_cli.cli.output import warning_line

                self._warned = True
                for line in settings.warnings:  # e.g. a misspelt RUNNERQ_ variable
                    warning_line(line)
            if extra:
                return settings
            self._settings = settings
        return self._settings

    def backend(self) -> RunnerQ:
        """The backend for the effective settings (server reachability is not checked here)."""
        if self._backend is None:
            from runnerq_cli.backend.api import RunnerQ

            self._backend = RunnerQ(self.settings())
        return self._backend

    def producer(self) -> Producer:
        """The enqueue side alone (backend/producer.py), for a command that only enqueues:
        it loads none of the worker's, the chores' or the views' modules (a CI step that
        enqueues once per item pays for every module loaded). The backend, if made."""
        if self._backend is not None:
            return self._backend
        from runnerq_cli.backend.producer import Producer

        return Producer(self.settings())


# The state of the invocation running now: main() reads it to explain a NotFound.
_current: CliState | None = None


def state(ctx: typer.Context) -> CliState:
    """The CliState of this invocation (created by the root callback)."""
    global _current
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    _current = root.obj
    return root.obj


def forget_current() -> None:
    """A new invocation starts (main(); tests run many in one process)."""
    global _current
    _current = None


def missing_queue(backend: RunnerQ | None = None) -> str | None:
    """When the configured queue does not exist (no activities collection: never
    enqueued to nor init-indexes'd; a typo, say), a sentence that says so, with the
    closest queue of the database or those there; else None. Reads refuse no queue (an
    absent queue reads as an empty one; writes refuse it: store/discovery.py), so an
    empty list, an all-zero `stats` or a NotFound asks this (one listCollections
    command) to tell "nothing there" from "not that queue"."""
    from runnerq_cli.errors import RunnerQError

    if backend is None:
        backend = _current._backend if _current is not None else None
    if backend is None:
        return None
    try:
        return backend.diagnosis.absent_queue()
    except RunnerQError:  # the server away, say: nothing to add
        return None


def warn_if_missing(backend: RunnerQ) -> None:
    """`warning: ...` on stderr when the queue is not there (missing_queue): an empty
    answer (a list, all-zero counts, no limits or schedules) that may be another queue's
    name mistyped. Costs one listCollections command; call it only on an empty answer."""
    missing = missing_queue(backend)
    if missing:
        from runnerq_cli.cli.output import warning_line

        warning_line(missing)

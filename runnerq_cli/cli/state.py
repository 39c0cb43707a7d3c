"""Per-invocation state: global options, and the settings and backend built from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
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


def state(ctx: typer.Context) -> CliState:
    """The CliState of this invocation (created by the root callback)."""
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    return root.obj

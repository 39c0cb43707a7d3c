"""`runnerq-mongo config show`: the effective settings and where each one came from.

Operators debugging "why does the worker talk to that server?" need the
winning value *and* its source (flag, environment variable, file, default),
without ever seeing the password in the URI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, emit, output_option
from runnerq_cli.cli.state import state

config_app = typer.Typer(help="Show the effective configuration.", no_args_is_help=True)


def _config_file(config_path: str | None) -> Path | None:
    """The file that load_settings reads (same rules: --config/RUNNERQ_CONFIG, else defaults)."""
    from runnerq_cli.config import default_config_paths

    if config_path:
        return Path(config_path)
    return next((p for p in default_config_paths() if p.is_file()), None)


def _display(value: Any, key_path: str) -> str:
    """Human form of a value: durations as 30s/5m, lists comma-separated, None as '-'."""
    from runnerq_cli.config import KEYS_BY_PATH
    from runnerq_cli.times import format_duration

    if value is None:
        return "-"
    if KEYS_BY_PATH[key_path].expects == "a duration":
        return format_duration(float(value))
    if isinstance(value, list | tuple):
        return ", ".join(value) if value else "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if value else "-"
    return str(value)


@config_app.command("show", epilog=examples("config show"))
def show(ctx: typer.Context, output: OutputFormat = output_option()) -> None:
    """Print every setting, its value and its source (flag / env VAR / file PATH / default).

    The password of the URI is always shown as ****.
    """
    from runnerq_cli.config import KEYS_BY_PATH

    cli = state(ctx)
    settings = cli.settings()  # ConfigError (exit 3) names the file, key and expectation
    rows = settings.effective()
    config_file = _config_file(cli.config_path)
    if output is not OutputFormat.TEXT:
        emit(output, {
            "config_file": str(config_file) if config_file else None,
            "settings": {key: {"value": value, "source": source,
                               "env": KEYS_BY_PATH[key].env_var}
                         for key, value, source in rows},
        })
        return
    from runnerq_cli.literal import literal

    # Values come from files and the environment: escaped, never markup or controls.
    shown = [(key, literal(_display(value, key)), literal(source)) for key, value, source in rows]
    typer.echo(f"config file: {literal(config_file) if config_file else 'none'}")
    from runnerq_cli.cli.words import screen_width

    # Columns aligned for the values that fit the screen; a longer value (a URI)
    # makes only its own line longer, never the others.
    width_key = max(len(r[0]) for r in shown)
    budget = screen_width() - width_key - 4 - max(len(r[2]) for r in shown)
    width_value = max([len(r[1]) for r in shown if len(r[1]) <= budget] or [1])
    for key, value, source in shown:
        typer.echo(f"{key:<{width_key}}  {value:<{width_value}}  {source}".rstrip())


def register(app: typer.Typer) -> None:
    """Add the `config` group to the root app."""
    app.add_typer(config_app, name="config")

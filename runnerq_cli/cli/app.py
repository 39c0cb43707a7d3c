"""The root `runnerq-mongo` command: global options, command registration, error handling."""

from __future__ import annotations

import importlib
import os
import sys

import typer

from runnerq_cli import __version__
from runnerq_cli.cli.output import error_line
from runnerq_cli.cli.state import CliState
from runnerq_cli.errors import ExitCode, RunnerQError

# Each module defines `register(app)`; one module per command or command group.
COMMAND_MODULES = (
    "config_cmd",
    "init_indexes",
    "enqueue",
    "dev_server",
    "worker",
    "tail",
    "stats",
    "inspect",
    "actions",
    "completion",
)

app = typer.Typer(
    name="runnerq-mongo",
    help="Run and watch RunnerQ activity queues stored in MongoDB.",
    no_args_is_help=True,
    add_completion=False,  # `runnerq-mongo completion` ships and installs the scripts
    pretty_exceptions_enable=False,
    # Plain click help: rich help formatting costs ~0.1 s of imports on every --help
    # (benchmarks/bench_cli_startup.py); help stays fast and greppable.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"runnerq-mongo {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    config: str | None = typer.Option(None, "--config", "-c", metavar="PATH",
                                      help="YAML config file (default: ./runnerq.yaml, then "
                                           "the user config dir).", envvar="RUNNERQ_CONFIG"),
    uri: str | None = typer.Option(None, "--uri", metavar="URI",
                                   help="MongoDB URI (env RUNNERQ_MONGO_URI)."),
    database: str | None = typer.Option(None, "--database", "--db", metavar="NAME",
                                        help="Database (env RUNNERQ_DATABASE)."),
    queue: str | None = typer.Option(None, "--queue", metavar="NAME",
                                     help="Queue name (env RUNNERQ_QUEUE)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    ctx.obj = CliState(config_path=config,
                       overrides={"uri": uri, "database": database, "queue": queue})


for _name in COMMAND_MODULES:
    importlib.import_module(f"runnerq_cli.cli.commands.{_name}").register(app)


def _handle_driver_error(exc: Exception) -> int:
    """pymongo errors that escaped a command: one redacted line, a meaningful code."""
    from pymongo import errors as mongo_errors

    from runnerq_cli.redaction import redact_uri

    if isinstance(exc, mongo_errors.ConnectionFailure | mongo_errors.ServerSelectionTimeoutError):
        detail = redact_uri(str(exc).split(", Timeout:")[0])[:200]
        error_line(f"MongoDB is unreachable: {detail}")
        return ExitCode.UNAVAILABLE
    error_line(f"MongoDB error: {redact_uri(str(exc))[:300]}")
    return ExitCode.FAILURE


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code (see errors.ExitCode)."""
    from typer._click import exceptions as click_exceptions

    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="runnerq-mongo", standalone_mode=False)
        code = int(result) if isinstance(result, int) else 0
    except typer.Exit as exc:
        code = exc.exit_code
    except click_exceptions.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        code = ExitCode.USAGE
    except click_exceptions.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        error_line(f"{exc.format_message()}{hint}")
        code = ExitCode.USAGE
    except click_exceptions.ClickException as exc:
        error_line(exc.format_message())
        code = exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        error_line("interrupted")
        code = ExitCode.INTERRUPTED
    except RunnerQError as exc:
        error_line(str(exc))
        code = exc.exit_code
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (`| head`): not an error
        code = ExitCode.OK
    except Exception as exc:
        if os.environ.get("RUNNERQ_DEBUG"):
            raise
        if type(exc).__module__.startswith(("pymongo", "bson")):
            code = _handle_driver_error(exc)
        else:
            error_line(f"internal error: {type(exc).__name__}: {exc} "
                       "(set RUNNERQ_DEBUG=1 for a traceback)")
            code = ExitCode.FAILURE
    return int(code)


def run() -> None:
    sys.exit(main())

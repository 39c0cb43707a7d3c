"""The root `runnerq-mongo` command: global options, command registration, error handling."""

# Annotations are evaluated here (no `from __future__ import annotations`): typer reads
# the root callback's signature at every run, and string annotations would be compiled one by one
# (about 2 ms of CPU per command run, tests/test_import_cost.py).

import errno
import functools
import importlib
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from runnerq_cli import __version__
from runnerq_cli.argv import command_word
from runnerq_cli.cli.exits import ExitCode, exit_code_of, message_of
from runnerq_cli.cli.output import error_line
from runnerq_cli.cli.parameters import plain_words, use_words_commands
from runnerq_cli.cli.state import CliState
from runnerq_cli.errors import RunnerQError

# Each module defines `register(app)`; one module per command or command group, in the
# order root --help lists them.
COMMAND_MODULES = (
    "config_cmd",
    "init_indexes",
    "enqueue",
    "dev_server",
    "worker",
    "console",
    "tail",
    "stats",
    "inspect",
    "actions",
    "durable",
    "control",
    "schedule",
    "limit",
    "dlq",
    "audit",
    "diagnose",
    "completion",
)
# The module that registers each top-level command (tests/test_import_cost.py checks this
# against what the modules register): a command run loads its own module only.
MODULE_OF = {
    "config": "config_cmd", "init-indexes": "init_indexes", "enqueue": "enqueue",
    "dev-server": "dev_server", "worker": "worker", "tail": "tail", "stats": "stats",
    **dict.fromkeys(("list", "show", "events", "result", "wait", "workers"), "inspect"),
    **dict.fromkeys(("cancel", "retry", "run-now", "reschedule", "set-priority", "delete",
                     "redrive", "purge"), "actions"),
    "signal": "durable", "tree": "durable",
    "pause": "control", "resume": "control", "dlq": "dlq", "audit": "audit",
    "schedule": "schedule", "scheduler": "schedule", "limit": "limit",
    **dict.fromkeys(("doctor", "explain", "queues", "metrics"), "diagnose"),
    "completion": "completion", "console": "console",
}


class _LazyRootGroup(TyperGroup):
    """The root group, converting a subcommand from its typer registration only when used.

    Converting every command (signature and type-hint inspection) costs ~40 ms
    on each run; root `--help` needs only names and one-line helps, and a
    command run needs only itself.
    """

    _pending: dict[str, Any]
    _summaries: dict[str, tuple[str, bool]]

    def defer(self, names: list[str], builders: dict[str, Any],
              summaries: dict[str, tuple[str, bool]]) -> None:
        self._order = names
        self._pending = builders
        self._summaries = summaries

    def list_commands(self, ctx: Any) -> list[str]:
        order = getattr(self, "_order", None)
        return list(order) if order is not None else super().list_commands(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        build = getattr(self, "_pending", {}).pop(cmd_name, None)
        if build is not None:
            self.commands[cmd_name] = plain_words(build())
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        pending = getattr(self, "_pending", None)
        if not pending or not args or args[0] in pending or args[0] in self.commands:
            return super().resolve_command(ctx, args)
        # An unknown name: let "Did you mean ...?" see every name, converting none.
        real = self.commands
        names: dict[str, Any] = dict.fromkeys(self.list_commands(ctx))
        self.commands = {**names, **real}
        try:
            return super().resolve_command(ctx, args)
        finally:
            self.commands = real

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        if not getattr(self, "_pending", None):
            super().format_commands(ctx, formatter)
            return
        from runnerq_cli.cli.root_help import write_commands

        write_commands(formatter, {name: help_text for name in self.list_commands(ctx)
                                   for help_text, hidden in [self._summaries[name]]
                                   if not hidden})


def _new_app() -> typer.Typer:
    return typer.Typer(
        name="runnerq-mongo",
        help="Run and watch RunnerQ activity queues stored in MongoDB.",
        no_args_is_help=True,
        add_completion=False,  # `runnerq-mongo completion` ships and installs the scripts
        pretty_exceptions_enable=False,
        # Plain click help: rich help formatting costs ~0.1 s of imports on every --help
        # (benchmarks/bench_cli_startup.py); help stays fast and greppable.
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
        cls=_LazyRootGroup,
    )


def _version(value: bool) -> None:
    if value:
        typer.echo(f"runnerq-mongo {__version__}")
        raise typer.Exit()


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
    utc: bool = typer.Option(True, "--utc/--local",
                             help="Show times in UTC (2026-12-01 05:05:17.503Z) or in the "
                                  "local time zone with its offset. JSON keeps UTC."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    from runnerq_cli.cli.timefmt import use_local

    use_local(not utc)
    ctx.obj = CliState(config_path=config,
                       overrides={"uri": uri, "database": database, "queue": queue})


@functools.cache
def build_app(modules: tuple[str, ...] = COMMAND_MODULES) -> typer.Typer:
    """The root command with the commands of `modules` registered (all by default)."""
    built = _new_app()
    built.callback()(root)
    for name in modules:
        importlib.import_module(f"runnerq_cli.cli.commands.{name}").register(built)
    use_words_commands(built)
    return built


def app_for(argv: list[str]) -> typer.Typer:
    """The app a command line needs: its command's module alone when the command word
    names one, else the root alone (root --help, --version, a misspelt name), whose
    commands are listed from cli/summaries.py and loaded only if one is asked for."""
    module = MODULE_OF.get(command_word(argv) or "")
    return build_app((module,) if module else ())


def _loader(name: str) -> Any:
    """Builds command `name` from its module, for a root built without it."""
    def build() -> Any:
        return _root_command(build_app((MODULE_OF[name],)))._pending[name]()
    return build


def __getattr__(name: str) -> Any:
    """`app`: every command registered (tools, tests, the completion generator)."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _root_command(app: typer.Typer | None = None) -> Any:
    """`typer.main.get_command(app)`, with the subcommands converted lazily (startup speed)."""
    import inspect

    app = app or build_app()

    from typer.main import (
        get_command_from_info,
        get_command_name,
        get_group_from_info,
        solve_typer_info_defaults,
    )

    saved = app.registered_commands, app.registered_groups
    try:
        app.registered_commands, app.registered_groups = [], []
        group = typer.main.get_command(app)
    finally:
        app.registered_commands, app.registered_groups = saved
    if not isinstance(group, _LazyRootGroup):
        return typer.main.get_command(app)
    if not app.registered_commands and not app.registered_groups:  # the root alone
        from runnerq_cli.cli.summaries import SUMMARIES

        group.defer([name for name, _, _ in SUMMARIES],
                    {name: _loader(name) for name, _, _ in SUMMARIES},
                    {name: (text, hidden) for name, hidden, text in SUMMARIES})
        return group
    names: list[str] = []
    builders: dict[str, Any] = {}
    summaries: dict[str, tuple[str, bool]] = {}
    # typer's internals, typed differently across the supported versions: Any here.
    options: dict[str, Any] = {"pretty_exceptions_short": app.pretty_exceptions_short,
                               "rich_markup_mode": app.rich_markup_mode}
    for info in app.registered_commands:
        name = info.name or get_command_name(getattr(info.callback, "__name__", ""))
        text = info.short_help or info.help or inspect.getdoc(info.callback) or ""
        names.append(name)
        summaries[name] = (text, bool(info.hidden))
        builders[name] = lambda info=info: get_command_from_info(info, **options)
    # `suggest_commands` ("Did you mean ...?") exists from typer 0.20 on.
    group_options: dict[str, Any] = ({"suggest_commands": app.suggest_commands}
                                     if hasattr(app, "suggest_commands") else {})
    for group_info in app.registered_groups:
        solved: Any = solve_typer_info_defaults(group_info)
        name = str(solved.name)
        names.append(name)
        summaries[name] = (solved.help or "", bool(solved.hidden))
        builders[name] = lambda info=group_info: get_group_from_info(
            info, **options, **group_options)
    group.defer(names, builders, summaries)
    return group


def _broken_pipe(exc: BaseException | None) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail loudly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def undecodable_argument(argv: list[str]) -> str | None:
    """A message naming the first argument that is not valid UTF-8, or None.

    Python hands such bytes over as lone surrogates (PEP 383); anything that
    later encodes them (a log line, a BSON document, an audit record) fails,
    possibly after a write. They are refused here, once, before any command runs.
    """
    for position, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = repr(arg.encode("utf-8", "surrogateescape")[:60])[2:-1]
            before = argv[position - 1] if position else ""
            after = f" after {before[:40]}" if before.startswith("-") else ""
            return (f"argument {position + 1}{after} is not valid UTF-8 ({shown}): "
                    "nothing was done")
    return None


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code (see cli/exits.ExitCode)."""
    from runnerq_cli.cli import typer_compat

    bad = undecodable_argument(argv if argv is not None else sys.argv[1:])
    if bad is not None:
        error_line(bad)
        return int(ExitCode.USAGE)
    click_exceptions = typer_compat.click_exceptions()
    typer_compat.install_fast_coercion()
    command = _root_command(app_for(argv if argv is not None else sys.argv[1:]))
    from runnerq_cli.cli.state import forget_current

    forget_current()
    try:
        result = command.main(args=argv, prog_name="runnerq-mongo", standalone_mode=False)
        code = int(result) if isinstance(result, int) else 0
    except typer.Exit as exc:
        code = exc.exit_code
    except typer_compat.no_args_is_help_error() as exc:
        help_ctx = getattr(exc, "ctx", None)
        typer.echo(help_ctx.get_help() if help_ctx else str(exc))
        code = ExitCode.USAGE
    except click_exceptions.UsageError as exc:
        from runnerq_cli.cli.error_hints import usage_hint

        hint = usage_hint(exc.format_message(), argv if argv is not None else sys.argv[1:])
        if not hint and exc.ctx:
            hint = f" (see '{exc.ctx.command_path} --help')"
        error_line(f"{exc.format_message()}{hint}")
        code = ExitCode.USAGE
    except click_exceptions.ClickException as exc:
        error_line(exc.format_message())
        code = exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        error_line("interrupted")
        code = ExitCode.INTERRUPTED
    except RunnerQError as exc:
        from runnerq_cli.cli.error_hints import error_hint

        error_line(f"{message_of(exc)}{error_hint(exc)}")
        code = exit_code_of(exc)
    except BrokenPipeError:
        _silence_stdout()  # the reader went away (`| head`): not an error
        code = ExitCode.OK
    except SystemExit as exc:
        # typer and rich turn a broken pipe into exit(1) themselves; for us a
        # reader that stopped reading (`| head`) is success, as for `cat`.
        if not _broken_pipe(exc.__context__):
            raise
        _silence_stdout()
        code = ExitCode.OK
    except Exception as exc:
        if os.environ.get("RUNNERQ_DEBUG"):
            raise
        # Driver errors never get here: the backend translates each into a RunnerQError
        # at its driver boundary (store/driver.py); what does is a bug of ours.
        error_line(f"internal error: {type(exc).__name__}: {exc} "
                   "(set RUNNERQ_DEBUG=1 for a traceback)")
        code = ExitCode.FAILURE
    return int(code)


def run() -> None:
    sys.exit(main())

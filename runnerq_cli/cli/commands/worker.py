"""`runnerq-mongo worker`: run handlers for a queue (engine in runnerq_cli.worker)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.choices import LOG_FORMATS, LOG_LEVELS, completer
from runnerq_cli.cli.examples import examples

if TYPE_CHECKING:
    from runnerq_cli.config import Settings
    from runnerq_cli.worker.handlers import HandlerRegistry
    from runnerq_cli.worker.metrics import PrometheusMetrics

HELP = (
    "Run handlers for the queue's activities under leases, until stopped.\n\n"
    "Handlers: --handler TYPE=package.module:function, --app package.module (a module "
    "that registers handlers), --exec TYPE='command args' (payload as JSON on stdin, "
    "result as JSON on stdout; exit 100 = non-retryable failure). Also from the config "
    "file: worker.handlers, worker.app, worker.exec.\n\n"
    "A worker claims only the activity types it has handlers for (--types narrows "
    "them), so other types on a shared queue stay pending for their own workers. "
    "To claim every type, give --all-types and a catch-all handler for the types "
    "without one of their own: --handler '*=MOD:FUNC' or --exec '*=COMMAND'.\n\n"
    "SIGTERM/SIGINT stop claiming and let running handlers finish (up to "
    "--shutdown-timeout), then release the rest; a second signal stops at once.\n\n"
    "--metrics-port serves this worker's metrics (RunnerQ's names, docs/diagnose.md) and "
    "its process's on http://HOST:PORT/metrics, Prometheus text or OpenMetrics by the "
    "scraper's Accept header.\n\n"
    "Exit codes: 0 ok, 2 bad options, 6 MongoDB unreachable at start, 15 the metrics "
    "address is in use, 20 --burst --fail-on-error saw failed attempts, 21 running work "
    "was released at shutdown, 130 stopped by a second signal."
)


def worker(
    ctx: typer.Context,
    handler: list[str] = typer.Option([], "--handler", metavar="TYPE=MOD:FUNC",
                                      help="Python handler by import path (repeatable)."),
    app_module: str | None = typer.Option(None, "--app", metavar="MODULE",
                                          help="Module whose import registers handlers."),
    exec_: list[str] = typer.Option([], "--exec", metavar="TYPE=COMMAND",
                                    help="A command, run without a shell (repeatable); "
                                         "payload JSON on stdin."),
    types: str | None = typer.Option(None, "--types", metavar="A,B",
                                     help="Claim only these of the handled types."),
    all_types: bool = typer.Option(False, "--all-types",
                                   help="Claim every type (needs a '*' catch-all handler)."),
    concurrency: int | None = typer.Option(None, "--concurrency", "-n", min=1, max=10_000,
                                           help="Activities run at once, 1 to 10,000 (default 4)."),
    lease: str | None = typer.Option(None, "--lease", metavar="DURATION",
                                     help="Lease of a claim, renewed while running "
                                          "(default 60s)."),
    poll_interval: str | None = typer.Option(None, "--poll-interval", metavar="DURATION",
                                             help="Longest idle wait between claims "
                                                  "(default 1s)."),
    shutdown_timeout: str | None = typer.Option(None, "--shutdown-timeout",
                                                metavar="DURATION",
                                                help="How long running work may finish after "
                                                     "a signal (default 30s)."),
    burst: bool = typer.Option(False, "--burst", help="Exit once nothing is due."),
    fail_on_error: bool = typer.Option(False, "--fail-on-error",
                                       help="With --burst: exit 20 if any attempt failed."),
    max_activities: int | None = typer.Option(None, "--max-activities", min=1, max=10**9,
                                              help="Exit after claiming this many."),
    worker_id: str | None = typer.Option(None, "--worker-id", help="Default: HOST-random."),
    log_format: str | None = typer.Option(None, "--log-format",
                                          autocompletion=completer(LOG_FORMATS),
                                          help="auto, rich, plain or json."),
    log_level: str | None = typer.Option(None, "--log-level",
                                         autocompletion=completer(LOG_LEVELS),
                                         help="debug, info, warning or error."),
    metrics_port: int | None = typer.Option(None, "--metrics-port", min=0, max=65535,
                                            metavar="PORT",
                                            help="Serve metrics on this TCP port, 0 to "
                                                 "65535 (0: any free port; logged)."),
    metrics_host: str | None = typer.Option(None, "--metrics-host", metavar="ADDRESS",
                                            help="Address the metrics listen on "
                                                 "(default 127.0.0.1; 0.0.0.0: every "
                                                 "interface)."),
) -> None:
    from runnerq_cli.cli.state import state
    from runnerq_cli.errors import InvalidArgument

    extra = {"lease": lease, "worker.concurrency": concurrency, "worker.types": types,
             "worker.poll_interval": poll_interval, "worker.shutdown_timeout": shutdown_timeout,
             "worker.log_format": log_format, "worker.log_level": log_level,
             "worker.app": app_module}
    settings = state(ctx).settings(**{k: v for k, v in extra.items() if v is not None})
    if fail_on_error and not burst:
        raise InvalidArgument("--fail-on-error needs --burst")
    if worker_id is not None:  # before anything connects or registers
        from runnerq_cli.texts import worker_id as checked_worker_id

        try:
            checked_worker_id(worker_id)
        except InvalidArgument as exc:
            raise InvalidArgument(f"--worker-id: {exc}") from None
    registry = _registry(settings, handler, exec_, all_types)
    if metrics_host is not None and metrics_port is None:
        raise InvalidArgument("--metrics-host needs --metrics-port")
    # Listening before connecting: an address in use or no address exits at once.
    served = _serve_metrics(metrics_host or "127.0.0.1", metrics_port) \
        if metrics_port is not None else None
    code = _run(settings, registry, served, burst=burst, fail_on_error=fail_on_error,
                max_activities=max_activities, worker_id=worker_id, all_types=all_types)
    raise typer.Exit(code)


def _run(settings: Settings, registry: HandlerRegistry,
         served: tuple[Any, PrometheusMetrics, str] | None, *, burst: bool,
         fail_on_error: bool, max_activities: int | None, worker_id: str | None,
         all_types: bool) -> int:
    """Connect, run the worker until it ends, and say its exit code: the flags were
    checked and the metrics are listening (so a bad option exits before connecting)."""
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.cli.exits import WORKER_FLAGS, flagged, worker_exit_code
    from runnerq_cli.errors import InvalidArgument
    from runnerq_cli.worker import startup
    from runnerq_cli.worker.engine import Worker
    from runnerq_cli.worker.logs import (
        WORKER_LOGGER,
        configure_logging,
        details,
        unconfigure_logging,
    )

    log = logging.getLogger(WORKER_LOGGER)
    ws = settings.worker
    backend = RunnerQ(settings)
    # The `runnerq` loggers (worker and backend) to standard error in the chosen format
    # (the library adds no handler of its own).
    log_handler = configure_logging(ws.log_format, ws.log_level)
    try:
        if served is not None:
            log.info("serving metrics", extra=details(url=served[2]))
        backend.ping()
        try:
            worker = Worker(backend, registry, burst=burst, fail_on_error=fail_on_error,
                            max_activities=max_activities, worker_id=worker_id,
                            all_types=all_types,
                            metrics=served[1] if served is not None else None)
        except InvalidArgument as exc:  # no handlers: said after the server answered
            raise flagged(exc, WORKER_FLAGS) from None
        end = worker.run()
        code = int(worker_exit_code(end))
        startup.exit_on_signal(code)  # a late signal does not change how it ended
    finally:
        unconfigure_logging(log_handler)
        if served is not None:
            served[0].shutdown()
            served[0].server_close()
    return code


def _serve_metrics(host: str, port: int) -> tuple[Any, PrometheusMetrics, str]:
    """The worker's metrics served (cli/exposition.py, as `metrics serve` does):
    (server, sink, url)."""
    from runnerq_cli.cli.exposition import listen, worker_registry

    registry, sink = worker_registry()
    server, url = listen(registry, host, port, host_flag="--metrics-host")
    return server, sink, url


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("worker", help=HELP, no_args_is_help=False,
                epilog=examples("worker"))(worker)


def _registry(settings: Settings, handler: list[str], exec_: list[str],
              all_types: bool) -> HandlerRegistry:
    """The handlers of the configuration and the flags (the flags' win), their type
    choices checked: incoherent ones exit 2 before connecting."""
    from runnerq_cli.cli.exits import WORKER_FLAGS, flagged
    from runnerq_cli.errors import InvalidArgument
    from runnerq_cli.worker.api import build_registry
    from runnerq_cli.worker.engine import claim_types
    from runnerq_cli.worker.handlers import parse_assignment

    ws = settings.worker
    handlers = dict(ws.handlers)
    handlers.update(parse_assignment(h, "--handler") for h in handler)
    commands = dict(ws.exec)
    commands.update(parse_assignment(e, "--exec") for e in exec_)
    registry = build_registry(app=ws.app, handlers=handlers, commands=commands,
                              queue=settings.queue, secrets=(settings.uri,))
    try:
        if len(registry):
            claim_types(registry, tuple(ws.types), all_types)
    except InvalidArgument as exc:
        raise flagged(exc, WORKER_FLAGS) from None
    return registry

"""`runnerq-mongo dev-server`: a local MongoDB-compatible server in the foreground.

Like `temporal server start-dev`: a newcomer without MongoDB or Docker gets a
server to try the queue against. It is mongoeco (pure Python, Python 3.13+),
in memory unless `--path` names an SQLite file. Not for production.
"""

from __future__ import annotations

from typing import Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.plural import counted


def _port_free(host: str, port: int) -> str | None:
    """None if `host:port` can be bound now, else the reason (checked before starting)."""
    import socket

    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's server does
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def dev_server(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(27017, "--port", min=0, max=65535,
                             help="Port to listen on (0: any free port)."),
    path: str | None = typer.Option(None, "--path", metavar="FILE.sqlite",
                                    help="Keep the data in this SQLite file (default: memory)."),
    init: bool = typer.Option(False, "--init",
                              help="Create the collections and indexes of the configured "
                                   "queue on start."),
) -> None:
    """Run a local MongoDB-compatible dev server (mongoeco) until Ctrl-C or SIGTERM.

    Prints the URI to use and an `export RUNNERQ_MONGO_URI=...` line.
    Exit codes: 0 stopped cleanly, 2 port in use or --path in a missing directory,
    3 mongoeco not installed.
    """
    import signal
    import sys
    import threading
    from pathlib import Path

    from runnerq_cli import paths
    from runnerq_cli.cli.devserver import start_in_thread
    from runnerq_cli.cli.output import fail
    from runnerq_cli.cli.state import state

    cli = state(ctx)
    if init:
        cli.settings()  # a bad queue name or config fails before the server starts
    if path is not None:
        paths.writable_file(path, "--path")
    busy = _port_free(host, port)
    if busy:
        fail(f"cannot listen on {host}:{port}: {busy} (is a MongoDB already running there? "
             "choose another --port)", ExitCode.USAGE)
    # Errors starting it (mongoeco missing: 3, port taken meanwhile: 2) carry their code.
    server = start_in_thread(host, port, Path(path) if path else None)

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        storage = f"SQLite file {path}" if path else "in memory, lost on exit"
        out = sys.stdout
        out.write(f"runnerq dev server (mongoeco; {storage})\n"
                  f"listening on {server.host}:{server.port}\n"
                  f"URI: {server.uri}\n"
                  f"  export RUNNERQ_MONGO_URI={server.uri}\n")
        out.flush()
        if init:
            from runnerq_cli.backend.api import RunnerQ

            settings = cli.settings(uri=server.uri)
            reports = RunnerQ(settings).maintenance.init_indexes()
            out.write(f"queue {settings.queue} in database {settings.database}: "
                      f"{counted(len(reports), 'index')} ready\n")
        out.write(_how_to_stop(out))
        out.flush()
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
    sys.stderr.write("dev server stopped\n")


def _how_to_stop(stream: Any) -> str:
    """The last line: not for production, then how to stop it where its output goes
    (cli/foreground.py: Ctrl-C only for a foreground job of a terminal)."""
    from runnerq_cli.cli.foreground import how_to_stop

    return "Not for production. " + how_to_stop(stream)


def register(app: typer.Typer) -> None:
    """Add `dev-server` to the root app."""
    app.command("dev-server", epilog=examples("dev-server"))(dev_server)

"""`runnerq-mongo console`: RunnerQ's console API and our page, served over HTTP.

Thin: it checks the options, builds the server (runnerq_cli/console/app.py),
prints the URL and serves until Ctrl-C or SIGTERM. What the server answers,
and why it is safe to leave open, is in docs/console.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.exits import ExitCode

if TYPE_CHECKING:
    from runnerq_cli.console.app import ConsoleServer

NOTE_EVERY = 10.0  # seconds between the console's notes of one outage


def console(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on (not a loopback one: a token is "
                                  "required)."),
    port: int = typer.Option(8081, "--port", min=0, max=65535,
                             help="Port to listen on (0: any free port)."),
    ui: str | None = typer.Option(None, "--ui", metavar="FILE",
                                  help="Serve this single-page console at / instead of ours "
                                       "(e.g. RunnerQ's runnerq-console.html)."),
    token: str | None = typer.Option(None, "--token", envvar="RUNNERQ_CONSOLE_TOKEN",
                                     show_envvar=False, metavar="TOKEN",
                                     help="Every request must carry it (env "
                                          "RUNNERQ_CONSOLE_TOKEN; at least 24 characters; "
                                          "on the command line `ps` shows it)."),
    token_file: str | None = typer.Option(None, "--token-file", metavar="FILE",
                                          help="Read the token from this file's first "
                                               "line (kept out of `ps`)."),
    allow_actions: bool = typer.Option(False, "--allow-actions",
                                       help="Allow retry, cancel, run-now, redrive, pause and "
                                            "resume from the page (previewed, confirmed, "
                                            "audited)."),
    max_action: int = typer.Option(1000, "--max-action", min=1, max=10_000,
                                   help="The most activities one action may change (1 to 10,000)."),
) -> None:
    """Serve a web console for the queue: RunnerQ's observability API and our page.

    Prints the URL to open. Binds 127.0.0.1 unless --host says otherwise.
    Exit codes: 0 stopped cleanly, 2 bad option (a non-loopback --host without
    a token, port in use, unreadable --ui), 6 database unreachable.
    """
    from runnerq_cli.cli.output import fail
    from runnerq_cli.cli.state import state
    from runnerq_cli.console.app import ConsoleConfig, serve

    if token_file is not None:
        if token is not None:
            fail("give the token once: --token (or RUNNERQ_CONSOLE_TOKEN) or --token-file",
                 ExitCode.USAGE)
        token = _read_token(token_file)
    source = ctx.get_parameter_source("token")
    from_env = token_file is None and source is not None and source.name == "ENVIRONMENT"
    # A bad RUNNERQ_CONSOLE_TOKEN is the environment's error (exit 3, named), as every
    # RUNNERQ_* variable's is (docs/input.md); --token's and --token-file's are exit 2.
    _check_binding(host, token, "--token-file" if token_file is not None
                   else "RUNNERQ_CONSOLE_TOKEN" if from_env else "--token",
                   ExitCode.CONFIG if from_env else ExitCode.USAGE)
    if source is not None and source.name == "COMMANDLINE":  # not the environment
        from runnerq_cli.cli.output import warning_line

        warning_line("--token on the command line is shown to every user of this machine "
                     "by `ps`: prefer --token-file FILE or RUNNERQ_CONSOLE_TOKEN")
    if ui is not None and allow_actions:
        fail("--ui with --allow-actions: a page the console did not write may not act "
             "(serve it without --allow-actions; act from our page or the command line)",
             ExitCode.USAGE)
    page = _read_ui(ui) if ui is not None else None
    rq = state(ctx).backend()
    rq.ping()  # unreachable: exit 3 now, not at the first page
    config = ConsoleConfig(host=host, port=port, token=token, allow_actions=allow_actions,
                           max_action=max_action, ui=page)
    try:
        server = serve(rq, config)
    except OSError as exc:
        import errno

        # the advice fits the failure: a port in use, or a --host that is no address here
        advice = "choose another --port" if exc.errno == errno.EADDRINUSE else "check --host"
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc} ({advice})",
             ExitCode.USAGE)
    server.outage = _outage_notes()
    _serve_until_stopped(server, rq.queue, token is not None, allow_actions)


def _serve_until_stopped(server: ConsoleServer, queue: str, with_token: bool,
                         allow_actions: bool) -> None:
    """Serve on a thread, print the URL and how to stop, and wait for Ctrl-C or SIGTERM:
    the server is shut down and closed however the wait ends."""
    import sys
    import threading

    from runnerq_cli.cli.foreground import how_to_stop
    from runnerq_cli.cli.interrupt import stop_on_signal

    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="console", daemon=True)
    thread.start()
    try:
        with stop_on_signal() as stop:
            out = sys.stdout
            out.write(f"runnerq console for queue {queue}: {server.url}\n")
            if with_token:
                out.write(f"  open {server.url}?token=... once (your token): the browser "
                          "keeps a session cookie, never the token\n")
            if allow_actions:
                out.write("  actions are on (previewed, confirmed, audited as from the "
                          "console)\n")
            out.write(how_to_stop(out))
            out.flush()
            while not stop.wait(0.5):
                pass
    finally:
        server.shutdown()
        server.server_close()
    sys.stderr.write("console stopped\n")


def register(app: typer.Typer) -> None:
    """Add `console` to the root app."""
    app.command("console", epilog=examples("console"))(console)


def _check_binding(host: str, token: str | None, flag: str = "--token",
                   code: ExitCode = ExitCode.USAGE) -> None:
    """A host others can reach needs a token; a token must be a secret."""
    from runnerq_cli.cli.output import fail
    from runnerq_cli.console import security
    from runnerq_cli.errors import InvalidArgument

    if token is None and not security.is_loopback(host):
        fail(f"--host {host} is not a loopback address: give a token (--token-file, "
             "RUNNERQ_CONSOLE_TOKEN or --token) so only those who hold it can read the queue",
             ExitCode.USAGE)
    try:
        security.check_binding(host, token)
    except InvalidArgument as exc:
        fail(f"{flag}: {exc}", code)


def _read_token(path: str) -> str:
    """--token-file's first line, without its line end (the file's other lines ignored)."""
    from runnerq_cli.cli.output import fail
    from runnerq_cli.inputs import Unreadable, read_input

    try:
        head = read_input(path, "--token-file", 4096)
    except Unreadable as exc:
        fail(f"--token-file {path}: {exc.reason}", ExitCode.USAGE)
    first, newline, _ = head.partition(b"\n")
    if not newline and len(head) > 4096:  # cut here, the token would not be the file's
        fail(f"--token-file {path}: the first line is longer than 4096 bytes",
             ExitCode.USAGE)
    first = first.rstrip(b"\r")
    token = first.decode("utf-8", "replace").strip()
    if not token:
        fail(f"--token-file {path}: the first line is empty", ExitCode.USAGE)
    return token


def _read_ui(ui: str) -> bytes:
    """The page of --ui, read whole (at most 8 MB: anything larger is not a page)."""
    from runnerq_cli.cli.output import fail
    from runnerq_cli.inputs import Unreadable, read_input

    try:
        page = read_input(ui, "--ui", 8 * 1024 * 1024)
    except Unreadable as exc:
        fail(f"--ui {ui}: {exc.reason}", ExitCode.USAGE)
    if len(page) > 8 * 1024 * 1024:
        fail(f"--ui {ui}: larger than 8 MB: is it a page?", ExitCode.USAGE)
    return page


def _outage_notes() -> Any:
    """The console's outage notes (cli/outage_notes.py, as every long-running command's):
    the first failed request of an outage, then at most one every NOTE_EVERY seconds (a
    page asks several times a second), and one line when a request is answered again."""
    import time

    from runnerq_cli.cli.outage_notes import note_away, watch

    last = [0.0]

    def away(outage: Any) -> None:
        now = time.monotonic()
        if outage.attempts == 1 or now - last[0] >= NOTE_EVERY:
            last[0] = now
            note_away(outage)

    return watch(answered=True, on_away=away)

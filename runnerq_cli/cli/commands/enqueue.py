"""`runnerq-mongo enqueue`: put one activity (TYPE) or many (`--from FILE`, NDJSON) on a queue.

One activity's input is validated before the server is contacted, so a typo
never writes half an activity and never waits for a server timeout first.
`--from` streams, a batch at a time: its reading, report and exit codes are
cli/enqueue_from.py, loaded only with --from (one enqueue stays light to start).
"""

# Annotations are evaluated here (no `from __future__ import annotations`): typer reads
# the command's signature at every run, and string annotations would be compiled one by one
# (about 2 ms of CPU per command run, tests/test_import_cost.py).

import os
from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.choices import ON_DUPLICATE, PRIORITIES, completer
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, emit, output_option
from runnerq_cli.cli.state import CliState, state
from runnerq_cli.errors import InvalidArgument

if TYPE_CHECKING:
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.backend.domain.models import EnqueueResult

DEFAULT_BATCH_SIZE = 100


# ------------------------------------------------------------------ parsing


def read_payload(payload: str | None) -> dict[str, Any]:
    """--payload JSON, --payload @file, --payload @- (stdin); without it, `{}`.

    Standard input is read only when asked for (`-p @-`): inside a shell
    `while read` loop, an implicit read would swallow the loop's own input.
    """
    from runnerq_cli import values

    if payload is None:
        return {}
    if payload.startswith("@"):
        from runnerq_cli.cli.payload_files import read_payload_file

        return read_payload_file(payload[1:])
    return values.json_object(payload, "--payload")


def parse_metadata(items: list[str]) -> dict[str, str]:
    """`k=v` pairs (repeatable --metadata) into a dict; later keys win."""
    from runnerq_cli.backend.domain.models import parse_metadata_pairs
    from runnerq_cli.cli.flags import METADATA

    return parse_metadata_pairs(items, METADATA)


# ------------------------------------------------------------------ one


def _print_one(result: "EnqueueResult", quiet: bool) -> None:
    """The id (-q) or a sentence (text)."""
    if quiet:  # a script's enqueue: nothing more to load (benchmarks/unrun_code.py)
        typer.echo(str(result.activity_id))
        return
    from runnerq_cli.cli.words import echo_fitted
    from runnerq_cli.literal import literal

    if result.created:
        typer.echo(f"enqueued {result.activity_id} ({literal(result.status)})")
    else:
        echo_fitted(f"existing {result.activity_id} ({literal(result.status)}): the "
                    "idempotency key is held by it, nothing enqueued")


def _emit_one(backend: "RunnerQ", result: "EnqueueResult", output: OutputFormat) -> None:
    """The whole activity, read back (JSON, YAML)."""
    from runnerq_cli.errors import NotFound

    try:
        doc = backend.get_activity(result.activity_id).to_json()
    except NotFound:  # an idempotency key whose activity is still being inserted
        doc = {"id": str(result.activity_id), "status": result.status}
    emit(output, {**doc, "created": result.created})


# ------------------------------------------------------------------ command


KEY_HELP = ("The flow key (a tenant...): per-key limits and fairness (`limit set`); with "
            "--from, each line's default.")
DEBOUNCE_HELP = ("With --key: replace a still-waiting activity of this type and key (the "
                 "newest payload wins) and run it this long after the last enqueue.")


def enqueue(
    ctx: typer.Context,
    activity_type: str | None = typer.Argument(None, metavar="TYPE",
                                               help="Activity type (omit with --from)."),
    payload: str | None = typer.Option(
        None, "--payload", "-p", metavar="JSON|@FILE",
        help="Payload: a JSON object, @FILE, or @- to read standard input (never read "
             "otherwise). Default: {}."),
    priority: str | None = typer.Option(None, "--priority", metavar="PRIORITY",
                                        autocompletion=completer(PRIORITIES),
                                        help="low, normal, high, critical or 1-4 "
                                             "[default: normal]."),
    delay: str | None = typer.Option(None, "--delay", metavar="DURATION",
                                     help="Run after this long: 30s, 5m, 2h."),
    at: str | None = typer.Option(None, "--at", metavar="TIME",
                                  help="Run at this ISO-8601 time (UTC unless it has a zone)."),
    max_retries: int | None = typer.Option(None, "--max-retries", metavar="N",
                                           help="Total attempts allowed, 0 = unlimited "
                                                "[default: 3]."),
    timeout: str | None = typer.Option(None, "--timeout", metavar="DURATION",
                                       help="Handler timeout [default: 5m]."),
    retry_delay: str | None = typer.Option(None, "--retry-delay", metavar="DURATION",
                                           help="Base of the exponential back-off [default: 1s]."),
    metadata: list[str] = typer.Option([], "--metadata", "-m", metavar="KEY=VALUE",
                                       help="A string tag; repeatable."),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key", metavar="KEY",
                                               help="Enqueue at most once per key and type."),
    on_duplicate: str | None = typer.Option(
        None, "--on-duplicate", metavar="BEHAVIOUR", autocompletion=completer(ON_DUPLICATE),
        help="When the key is held: allow-reuse, return-existing (default), "
             "allow-reuse-on-failure, no-reuse."),
    key: str | None = typer.Option(None, "--key", metavar="KEY", help=KEY_HELP),
    debounce: str | None = typer.Option(None, "--debounce", metavar="DURATION", help=DEBOUNCE_HELP),
    from_file: str | None = typer.Option(None, "--from", metavar="FILE",
                                         help="Enqueue many: NDJSON, one activity per line "
                                              "(- for stdin)."),
    strict: bool = typer.Option(False, "--strict",
                                help="With --from: write nothing if any line is invalid."),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", min=1, max=10000,
                                   help="With --from: activities per write (1 to 10,000)."),
    skip_lines: int = typer.Option(0, "--skip-lines", min=0, max=2**63 - 1, metavar="N",
                                   help="With --from: skip the first N lines (go on after "
                                        "an interrupted run: it prints N)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the activity id(s)."),
    wait: bool = typer.Option(False, "--wait", help="Block until the activity is terminal, "
                                                    "print its result, exit like `wait`."),
    wait_timeout: str | None = typer.Option(None, "--wait-timeout", metavar="DURATION",
                                            help="With --wait: give up after this long "
                                                 "(exit 13)."),
    output: OutputFormat = output_option(),
) -> None:
    """Enqueue one activity of TYPE, or many from an NDJSON file with --from.

    With --from the input is read line by line and written a batch at a time
    (memory stays bounded). Ctrl-C or SIGTERM (one or more) finishes the batch in
    progress, prints the last line reached and exits 130: rerun with --skip-lines N.

    Exit codes: 0 enqueued (or an existing or debounced activity returned), 2 invalid
    input (with --from: any line rejected; --debounce without --key), 3 bad config, 5
    idempotency key held (no-reuse / allow-reuse-on-failure), 6 server unreachable, 130
    interrupted (--from).
    """
    cli = state(ctx)
    wait_seconds = _checked_flags(activity_type, from_file, payload, idempotency_key, strict,
                                  skip_lines, wait, wait_timeout)
    options = _options_of_flags(priority=priority, delay=delay, at=at,
                                max_retries=max_retries, timeout=timeout,
                                retry_delay=retry_delay, metadata=metadata,
                                on_duplicate=on_duplicate, idempotency_key=idempotency_key)
    options.update(_flow_options(key, debounce, from_file))
    if from_file is not None:
        from runnerq_cli.cli.enqueue_from import enqueue_from

        enqueue_from(cli, from_file, options, strict=strict, batch_size=batch_size,
                      output=output, quiet=quiet, skip_lines=skip_lines)
        return
    assert activity_type is not None  # _checked_flags
    spec = _spec_of_flags(activity_type, payload, options)
    cli.settings()  # config errors before connecting
    _enqueue_one(cli, spec, output=output, quiet=quiet, wait=wait, wait_seconds=wait_seconds)


def _options_of_flags(*, metadata: list[str], **flags: Any) -> dict[str, Any]:
    """The activity options of the flags (spec_options: each checked, named by its flag),
    with the trace context of the environment: a traced pipeline's TRACEPARENT/TRACESTATE
    go with each activity (a malformed one is ignored, as W3C says); without them,
    OpenTelemetry's current context, if any."""
    from runnerq_cli.backend.domain.specs import spec_options
    from runnerq_cli.backend.domain.tracecontext import from_environment
    from runnerq_cli.cli.flags import flag as flag_name

    options = spec_options(**flags, metadata=parse_metadata(metadata), name=flag_name)
    traced = from_environment(os.environ)
    if traced is not None:
        options["trace_context"] = traced
    return options


def _flow_options(key: str | None, debounce: str | None,
                  from_file: str | None) -> dict[str, Any]:
    """--key and --debounce (docs/design.md, "Flow control"), each checked."""
    from runnerq_cli.backend.domain.specs import flow_key

    options: dict[str, Any] = {}
    if key is not None:
        options["key"] = flow_key(key, "--key")
    if debounce is not None:
        if from_file is not None:
            raise InvalidArgument("--debounce applies to one activity, not to --from")
        if key is None:
            raise InvalidArgument("--debounce needs --key: activities are debounced per key")
        from runnerq_cli.times import duration

        seconds = duration(debounce, "--debounce", maximum=86400)
        if seconds <= 0:
            raise InvalidArgument(f"--debounce: must be longer than 0 seconds, got {debounce!r}")
        options["debounce_seconds"] = seconds
    return options


def _checked_flags(activity_type: str | None, from_file: str | None, payload: str | None,
                   idempotency_key: str | None, strict: bool, skip_lines: int, wait: bool,
                   wait_timeout: str | None) -> float | None:
    """The flags that do not go together, refused before anything is read or written;
    the seconds of --wait-timeout."""
    if (wait or wait_timeout) and from_file is not None:
        raise InvalidArgument("--wait applies to one activity, not to --from")
    if wait_timeout is not None and not wait:
        raise InvalidArgument("--wait-timeout needs --wait")
    wait_seconds = None
    if wait_timeout:
        from runnerq_cli.times import duration  # a plain enqueue parses no duration

        wait_seconds = duration(wait_timeout, "--wait-timeout")
    if from_file is not None:
        if activity_type is not None:
            raise InvalidArgument("give an activity TYPE or --from FILE, not both")
        for flag, value in (("--payload", payload), ("--idempotency-key", idempotency_key)):
            if value is not None:
                raise InvalidArgument(f"{flag} does not apply to --from (set it on each line)")
        return wait_seconds
    if activity_type is None:
        raise InvalidArgument("missing activity TYPE (or --from FILE to enqueue many)")
    if strict:
        raise InvalidArgument("--strict applies only to --from")
    if skip_lines:
        raise InvalidArgument("--skip-lines applies only to --from")
    return wait_seconds


def _spec_of_flags(activity_type: str, payload: str | None, options: dict[str, Any]) -> Any:
    from runnerq_cli.backend.domain.specs import ActivitySpec

    return ActivitySpec(activity_type, read_payload(payload), **options)


def _enqueue_one(cli: CliState, spec: Any, *, output: OutputFormat, quiet: bool,
                 wait: bool, wait_seconds: float | None) -> None:
    """Enqueue one activity; with --wait, block until it is terminal and exit like `wait`."""
    if not wait and (quiet or output is OutputFormat.TEXT):  # the producer alone will do
        _print_one(cli.producer().enqueue(spec), quiet)
        return
    backend = cli.backend()  # the whole backend, to read the activity back or wait for it
    result = backend.enqueue(spec)
    if not wait:
        _emit_one(backend, result, output)
        return
    if output is OutputFormat.TEXT:  # with --wait, JSON is one document
        _print_one(result, quiet)
    from runnerq_cli.cli.outage_notes import watch  # shared with `runnerq-mongo wait`
    from runnerq_cli.cli.wait_report import report

    # The server answered the enqueue: an outage from now on is waited for.
    outcome = backend.wait(result.activity_id, wait_seconds, outage=watch(answered=True))
    raise typer.Exit(report(outcome, output, extra={"created": result.created}))


def register(app: typer.Typer) -> None:
    """Add `enqueue` to the root app."""
    app.command("enqueue", epilog=examples("enqueue"))(enqueue)

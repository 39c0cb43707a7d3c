"""`runnerq-mongo limit ...`: flow limits per activity type and per key (docs/design.md,
"Flow control"; docs/cli.md, "limit").

Thin: values are parsed by the backend's one parser (ops/limits.py `make_limits`, the
same for `set`'s options and `apply`'s file), checked whole before anything is written;
the store and the audit are backend/ops/limits.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.as_code import print_apply, read_yaml_file
from runnerq_cli.cli.audited import (
    ACTOR_OPT,
    CREATE_OPT,
    REASON_OPT,
    audit_command,
    check_reason_actor,
    existing_queue,
)
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import OutputFormat, emit, output_option
from runnerq_cli.cli.state import state, warn_if_missing
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.literal import literal

if TYPE_CHECKING:
    from runnerq_cli.backend.ops.limits import LimitInfo

limit_app = typer.Typer(
    help="Flow limits: at most N running per type or per key, rates, across the fleet.",
    no_args_is_help=True)

# make_limits names each value as `apply`'s file and the console do; `set` has flags.
LIMIT_FLAGS = {"concurrency": "--concurrency", "key_limit": "--key-limit", "rate": "--rate",
               "key_rate": "--key-rate"}

def _line(info: LimitInfo) -> list[str]:
    lim = info.limits
    keys = ", ".join(f"{k or '(no key)'}={n}" for k, n in info.busiest_keys(3)) or "-"
    in_use = f"{len(info.holders)}" + (f"/{lim.concurrency}" if lim.concurrency else "")
    return [lim.activity_type, str(lim.concurrency or "-"), str(lim.key_concurrency or "-"),
            str(lim.rate or "-"), str(lim.key_rate or "-"), in_use, keys]


@limit_app.command("set", epilog=examples("limit set"))
def set_limit(
    ctx: typer.Context,
    activity_type: str = typer.Argument(..., metavar="TYPE", help="The activity type."),
    concurrency: str | None = typer.Option(None, "--concurrency", metavar="N",
                                           help="At most N running across the fleet."),
    key_limit: str | None = typer.Option(None, "--key-limit", metavar="M",
                                         help="At most M running per key."),
    rate: str | None = typer.Option(None, "--rate", metavar="COUNT/PERIOD",
                                    help="At most COUNT starts in any PERIOD (100/1m)."),
    key_rate: str | None = typer.Option(None, "--key-rate", metavar="COUNT/PERIOD",
                                        help="At most COUNT starts per key in any PERIOD."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    create: bool = CREATE_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Set TYPE's limits (the ones not given are removed). Exit code 2 for a bad value
    (zero, negative, fractional, above 100,000; a rate not COUNT/PERIOD, a period
    outside 1s-1d), 4 for a queue that does not exist (without --create): nothing
    written. Workers obey it within 5 seconds."""
    from runnerq_cli.backend.domain.flow import make_limits
    from runnerq_cli.cli.exits import flagged

    check_reason_actor(reason, actor)
    try:
        limits = make_limits(activity_type, concurrency, key_limit, rate, key_rate)
    except InvalidArgument as exc:  # named as the file's fields: say the flags typed
        raise flagged(InvalidArgument(str(exc), *LIMIT_FLAGS), LIMIT_FLAGS) from None
    done = existing_queue(ctx, create).limits.set(limits, reason=reason, actor=actor,
                                          command=audit_command(ctx))
    if output is not OutputFormat.TEXT:
        emit(output, {**limits.to_json(), "result": done})
        return
    typer.echo(f"{done} limit of {literal(activity_type)}: {limits.describe()}")


@limit_app.command("list", epilog=examples("limit list"))
def list_limits(ctx: typer.Context, output: OutputFormat = output_option()) -> None:
    """Every limit, with the slots in use and the busiest keys."""
    backend = state(ctx).backend()
    rows = backend.limits.list_limits()
    if not rows:
        warn_if_missing(backend)  # no limits, or not that queue?
    if output is not OutputFormat.TEXT:
        emit(output, [r.to_json() for r in rows])
        return
    if not rows:
        typer.echo("no limits")
        return
    from runnerq_cli.cli.tables import Column, print_table

    print_table([Column("type", style="bold"), Column("concurrency"), Column("per key"),
                 Column("rate"), Column("per key rate", drop=2), Column("in use"),
                 Column("busiest keys", flexible=True, drop=1)],
                [_line(r) for r in rows])


@limit_app.command("show", epilog=examples("limit show"))
def show(ctx: typer.Context,
         activity_type: str = typer.Argument(..., metavar="TYPE", help="The activity type."),
         output: OutputFormat = output_option()) -> None:
    """One limit: its values, who holds its slots, its starts in the rate window. Exit
    code 4 if TYPE has no limit."""
    info = state(ctx).backend().limits.get(activity_type)
    if output is not OutputFormat.TEXT:
        emit(output, info.to_json())
        return
    typer.echo(f"{literal(activity_type)}: {info.limits.describe()}")
    typer.echo(f"in use: {len(info.holders)}"
               + (f" of {info.limits.concurrency}" if info.limits.concurrency else ""))
    for holder in info.holders:
        typer.echo(f"  {literal(str(holder.get('w')))}  key "
                   f"{literal(str(holder.get('k') or '(no key)'))}")
    if info.limits.rate or info.limits.key_rate:
        typer.echo(f"starts in the rate window: {info.starts_in_window}")


@limit_app.command("remove", epilog=examples("limit remove"))
def remove(
    ctx: typer.Context,
    activity_type: str = typer.Argument(..., metavar="TYPE", help="The activity type."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Remove TYPE's limit: it runs unlimited again. Exit code 4 if it has none."""
    check_reason_actor(reason, actor)
    existing_queue(ctx, None).limits.remove(activity_type, reason=reason, actor=actor,
                                     command=audit_command(ctx))
    if output is not OutputFormat.TEXT:
        emit(output, {"activity_type": activity_type, "result": "removed"})
        return
    typer.echo(f"removed limit of {literal(activity_type)}")


def read_limits_file(path: str) -> list[Any]:
    """`apply`'s YAML (or JSON) file: a list of `{type, concurrency, key_limit, rate,
    key_rate}`, or `{limits: [...]}`; one line naming the file on a refusal."""
    from runnerq_cli.backend.domain.flow import limits_from_data
    data = read_yaml_file(path, "a limits file")
    try:
        return limits_from_data(data)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{path}: {exc}") from None


@limit_app.command("apply", epilog=examples("limit apply"))
def apply(
    ctx: typer.Context,
    path: str = typer.Argument(..., metavar="FILE", help="A YAML file of limits."),
    prune: bool = typer.Option(False, "--prune", help="Remove the limits not in FILE."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; change nothing."),
    reason: str | None = REASON_OPT,
    actor: str | None = ACTOR_OPT,
    create: bool = CREATE_OPT,
    output: OutputFormat = output_option(),
) -> None:
    """Make the queue's limits those of FILE (limits as code, at every deploy).
    Idempotent: a second apply changes nothing and says so. Exit code 2 for a file that
    does not read or a bad value, 4 for a queue that does not exist (without --create):
    nothing written."""
    check_reason_actor(reason, actor)
    wanted = read_limits_file(path)
    report = existing_queue(ctx, create).limits.apply(wanted, prune=prune, dry_run=dry_run,
                                              reason=reason, actor=actor,
                                              command=audit_command(ctx))
    print_apply(report, output, dry_run, path, "limit", lambda change: change.activity_type)


def register(app: typer.Typer) -> None:
    """Add `limit` (set, list, show, remove, apply) to the root app."""
    app.add_typer(limit_app, name="limit")

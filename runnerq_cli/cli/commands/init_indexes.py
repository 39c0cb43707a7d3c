"""`runnerq-mongo init-indexes`: create the queue's collections and indexes, idempotently.

Safe to run at every deploy: existing indexes are reported as present, and an
index that exists with other options is reported as a conflict and never
dropped (an operator decides). `--dry-run` and `--check` write nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from runnerq_cli.cli.confirmation import confirm
from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.output import OutputFormat, emit, fail, output_option
from runnerq_cli.cli.state import state
from runnerq_cli.plural import counted

if TYPE_CHECKING:
    from runnerq_cli.backend.queue.maintenance import PartitionChange
    from runnerq_cli.config import Settings

_LABELS = {"created": "created", "present": "present", "missing": "would create",
           "conflict": "CONFLICT", "obsolete": "obsolete", "dropped": "dropped"}


def _keys(keys: dict[str, int]) -> str:
    """Index keys in sort notation, `(-priority, created_at, _id)`: short enough that a
    line fits 80 columns (JSON output keeps MongoDB's `{priority: -1, ...}`)."""
    return "(" + ", ".join(k if v == 1 else f"-{k}" if v == -1 else f"{k}: {v}"
                           for k, v in keys.items()) + ")"


def _options(options: dict[str, Any]) -> str:
    """Index options as the server reads them, values in JSON (never Python's repr)."""
    import json

    from runnerq_cli.backend.domain.models import to_jsonable

    return ", ".join(f"{k}={json.dumps(to_jsonable(v), separators=(',', ':'))}"
                     for k, v in options.items())


def _print_text(collections: list[dict[str, Any]], indexes: list[dict[str, Any]],
                prefix: str) -> None:
    """One plain line per collection and index that is not simply there (created,
    missing, conflicting, obsolete, dropped), the same on a terminal and off it: when
    everything is in place the summary line alone says so (`-o json` lists every one).

    The queue's prefix (`runnerq_QUEUE_`) is said once in the summary, not on
    every line, and a line wider than the screen puts its options and difference
    on indented lines of their own, so the lines fit 80 columns. Names from the
    server are escaped.
    """
    from runnerq_cli.cli.output import console
    from runnerq_cli.literal import literal

    for coll in collections:
        if coll["state"] != "present":
            typer.echo(f"collection {literal(coll['name'])}: {_LABELS[coll['state']]}")
    width = console(markup=False).width
    for ix in (ix for ix in indexes if ix["state"] != "present"):
        head = (f"{_LABELS[ix['state']]}: {literal(ix['collection'].removeprefix(prefix))} "
                f"{literal(_keys(ix['keys']))}")
        options = f"({literal(_options(ix['options']))})" if ix["options"] else ""
        difference = (f"{literal(ix['difference'])} (not dropped)" if ix["state"] == "conflict"
                      else literal(ix["difference"]) if ix["state"] in ("obsolete", "dropped")
                      else "")
        parts = [p for p in (head, options, difference) if p]
        line = f"{head} {options}".rstrip() + (f": {difference}" if difference else "")
        if len(line) <= width:
            typer.echo(line)
        else:  # too wide: the options and the difference go on lines of their own
            for n, part in enumerate(parts):
                typer.echo(part if n == 0 else f"    {part}")


def _partition_line(before: int, after: int, stamped: int, *, written: bool) -> str:
    """What --partitions did (or, written False, would do), on one line."""
    was = "malformed" if before == 0 else str(before)
    head = (f"partitions: {after} (unchanged)" if before == after
            else f"partitions: {was} -> {after}" + ("" if written else " (not written)"))
    if stamped:  # within 80 columns up to millions of activities
        head += (f"; {counted(stamped, 'activity')} given partition 0" if written
                 else f"; {counted(stamped, 'activity')} would get partition 0")
    return head


def init_indexes(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Print the plan; create nothing (not even collections)."),
    check: bool = typer.Option(False, "--check",
                               help="Write nothing; exit 7 if anything is missing or differs."),
    drop_obsolete: bool = typer.Option(
        False, "--drop-obsolete",
        help="Also drop the indexes this version no longer uses (asks first; see --yes)."),
    yes: bool = typer.Option(False, "--yes", "-y",
                             help="Drop obsolete indexes without asking (needed off a terminal)."),
    partitions: int | None = typer.Option(
        None, "--partitions", metavar="N",
        help="Make the queue one of N partitions (from 1 to 256; it can only grow; "
             "docs/partitions.md)."),
    output: OutputFormat = output_option(),
) -> None:
    """Create the queue's collections and indexes (idempotent; conflicts are never dropped).

    Indexes an earlier version created and this one no longer uses are
    reported as obsolete and kept, until --drop-obsolete.

    With --partitions N the queue becomes one of N partitions (stored in its
    control collection; activities without a partition get partition 0) and
    gets the partitioned plan's indexes. It shards nothing: see doctor.

    Exit codes: 0 done (or --check holds, or --dry-run), 7 (check failed) when
    --check finds a missing or differing index, or when an index conflicts
    (nothing is dropped), 6 server unreachable, 2 a declined or unconfirmed drop,
    or fewer partitions than the queue has.
    """
    cli = state(ctx)
    settings = cli.settings()  # invalid queue names and config fail here, before connecting
    if partitions is not None:  # out of range: exit 2 at once, not exit 6 with no server
        from runnerq_cli.backend.domain.partitions import check_count

        try:
            check_count(partitions)
        except ValueError as exc:
            fail(f"--{exc}")
    backend = cli.backend()
    write = not (dry_run or check)
    missing_collections = set(backend.maintenance.missing_collections())
    change = None if partitions is None else \
        backend.maintenance.set_partitions(partitions, write=write)
    reports = [r.to_json() for r in backend.maintenance.init_indexes(write=write,
                                                                     partitions=partitions)]
    obsolete = [r for r in reports if r["state"] == "obsolete"]
    if drop_obsolete and obsolete and not (dry_run or check):
        names = ", ".join(f"{r['collection']}.{r['difference'].removeprefix('name ')}"
                          for r in obsolete)
        confirm(f"Drop {counted(len(obsolete), 'obsolete index')} ({names})?", yes)
        reports = [r.to_json()
                   for r in backend.maintenance.init_indexes(write=True, drop_obsolete=True,
                                                             partitions=partitions)]
    collections = _collections(settings.queue, missing_collections, write)
    states = [r["state"] for r in reports]
    ok = "conflict" not in states and (not check or "missing" not in states)
    if output is not OutputFormat.TEXT:
        emit(output, {"queue": settings.queue, "database": settings.database,
                      "mode": "check" if check else "dry-run" if dry_run else "write",
                      "ok": ok, "collections": collections, "indexes": reports,
                      **({} if change is None else {"partitions": change.to_json()})})
    else:
        _print_report(settings, change, collections, reports)
    if not ok and not dry_run:  # a dry run only shows the plan
        if "conflict" in states:
            what = "an index conflicts with an existing one (nothing was dropped)"
        else:
            what = "indexes are missing (run init-indexes)"
        fail(f"check failed: {what}", ExitCode.CHECK_FAILED)


def _collections(queue: str, missing: set[str], write: bool) -> list[dict[str, str]]:
    """Each collection of the queue and its state: present, created (written) or missing."""
    from runnerq_cli.backend.domain.naming import CollectionNames

    collections = []
    for name in CollectionNames(queue).all().values():
        coll_state = "present" if name not in missing else \
            "created" if write else "missing"
        collections.append({"name": name, "state": coll_state})
    return collections


def _print_report(settings: Settings, change: PartitionChange | None,
                  collections: list[dict[str, str]], reports: list[dict[str, Any]]) -> None:
    """The text report: the partitions' change, each collection and index, a summary."""
    states = [r["state"] for r in reports]
    if change is not None:
        typer.echo(_partition_line(change.before, change.after, change.stamped,
                                   written=change.written))
    _print_text(collections, reports, f"runnerq_{settings.queue}_")
    counts = {s: states.count(s) for s in _LABELS if states.count(s)}
    summary = ", ".join(f"{n} {_LABELS[s]}" for s, n in counts.items())
    typer.echo(f"{settings.database}: queue {settings.queue}: {summary}")
    if "obsolete" in states:
        typer.echo("obsolete indexes are kept; drop them with init-indexes --drop-obsolete")


def register(app: typer.Typer) -> None:
    """Add `init-indexes` to the root app."""
    app.command("init-indexes", epilog=examples("init-indexes"))(init_indexes)

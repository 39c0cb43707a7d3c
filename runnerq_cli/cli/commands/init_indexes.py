"""`runnerq-mongo init-indexes`: create the queue's collections and indexes, idempotently.

Safe to run at every deploy: existing indexes are reported as present, and an
index that exists with other options is reported as a conflict and never
dropped (an operator decides). `--dry-run` and `--check` write nothing.
"""

from __future__ import annotations

from typing import Any

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.cli.output import (
    OutputFormat,
    confirm,
    emit,
    fail,
    is_terminal,
    output_option,
)
from runnerq_cli.cli.state import state
from runnerq_cli.errors import ExitCode

_LABELS = {"created": "created", "present": "present", "missing": "would create",
           "conflict": "CONFLICT", "obsolete": "obsolete", "dropped": "dropped"}


def _keys(keys: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in keys.items()) + "}"


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def _print_text(collections: list[dict[str, Any]], indexes: list[dict[str, Any]]) -> None:
    """A rich table on a terminal; one plain line per collection and index otherwise."""
    coll_lines = [c for c in collections if c["state"] != "present"]
    if is_terminal():
        from rich.table import Table

        from runnerq_cli.cli.output import console

        out = console()
        for coll in coll_lines:
            out.print(f"collection {coll['name']}: {_LABELS[coll['state']]}")
        table = Table()
        for column in ("collection", "index", "options", "state", "why / difference"):
            table.add_column(column)
        styles = {"created": "green", "present": "dim", "missing": "yellow", "conflict": "red",
                  "obsolete": "yellow", "dropped": "green"}
        for ix in indexes:
            table.add_row(ix["collection"], _keys(ix["keys"]), _options(ix["options"]),
                          f"[{styles[ix['state']]}]{_LABELS[ix['state']]}[/]",
                          ix["difference"] or ix["why"])
        out.print(table)
        return
    for coll in coll_lines:
        typer.echo(f"collection {coll['name']}: {_LABELS[coll['state']]}")
    for ix in indexes:
        extra = f" ({_options(ix['options'])})" if ix["options"] else ""
        line = f"{_LABELS[ix['state']]}: {ix['collection']} {_keys(ix['keys'])}{extra}"
        if ix["state"] == "conflict":
            line += f": {ix['difference']} (not dropped)"
        elif ix["state"] in ("obsolete", "dropped"):
            line += f": {ix['difference']}"
        typer.echo(line)


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
    output: OutputFormat = output_option(),
) -> None:
    """Create the queue's collections and indexes (idempotent; conflicts are never dropped).

    Indexes an earlier version created and this one no longer uses are
    reported as obsolete and kept, until --drop-obsolete.

    Exit codes: 0 done (or --check holds, or --dry-run), 7 (check failed) when
    --check finds a missing or differing index, or when an index conflicts
    (nothing is dropped), 6 server unreachable, 2 a declined or unconfirmed drop.
    """
    from runnerq_cli.backend.naming import CollectionNames

    cli = state(ctx)
    settings = cli.settings()  # invalid queue names and config fail here, before connecting
    backend = cli.backend()
    write = not (dry_run or check)
    missing_collections = set(backend.missing_collections())
    reports = [r.to_json() for r in backend.init_indexes(write=write)]
    obsolete = [r for r in reports if r["state"] == "obsolete"]
    if drop_obsolete and obsolete and not (dry_run or check):
        names = ", ".join(f"{r['collection']}.{r['difference'].removeprefix('name ')}"
                          for r in obsolete)
        confirm(f"Drop {len(obsolete)} obsolete indexes ({names})?", yes)
        reports = [r.to_json() for r in backend.init_indexes(write=True, drop_obsolete=True)]
    collections = []
    for name in CollectionNames(settings.queue).all().values():
        coll_state = "present" if name not in missing_collections else \
            "created" if write else "missing"
        collections.append({"name": name, "state": coll_state})
    states = [r["state"] for r in reports]
    ok = "conflict" not in states and (not check or "missing" not in states)
    if output is not OutputFormat.TEXT:
        emit(output, {"queue": settings.queue, "database": settings.database,
                      "mode": "check" if check else "dry-run" if dry_run else "write",
                      "ok": ok, "collections": collections, "indexes": reports})
    else:
        _print_text(collections, reports)
        counts = {s: states.count(s) for s in _LABELS if states.count(s)}
        summary = ", ".join(f"{n} {_LABELS[s]}" for s, n in counts.items())
        typer.echo(f"{settings.database}: queue {settings.queue}: {summary}")
        if "obsolete" in states:
            typer.echo("obsolete indexes are kept; drop them with init-indexes --drop-obsolete")
    if not ok and not dry_run:  # a dry run only shows the plan
        if "conflict" in states:
            what = "an index conflicts with an existing one (nothing was dropped)"
        else:
            what = "indexes are missing (run init-indexes)"
        fail(f"check failed: {what}", ExitCode.CHECK_FAILED)


def register(app: typer.Typer) -> None:
    """Add `init-indexes` to the root app."""
    app.command("init-indexes", epilog=examples("init-indexes"))(init_indexes)

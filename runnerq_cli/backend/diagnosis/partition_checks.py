"""doctor's `partitions` check (docs/design.md, "Partitions" and "Sharding a partitioned
queue"): the stored count, activities no claim of a partitioned queue reaches, and on a
sharded cluster each collection's shard key and the activities' zones, as far as the
user may read `config.collections` and `config.tags`.

`init-indexes` shards nothing; this check says what a sharded deployment needs (the
facts' `sharding` entry, the same whatever the topology) and, on `mongos`, whether it
has it. Every read is bounded: the control document by `_id`, counts through
`partition_1__id_1` with a limit, the config documents of this queue's collections.
"""

from __future__ import annotations

from typing import Any

from runnerq_cli.backend.diagnosis.checks import activities, count
from runnerq_cli.backend.domain.checks import Check, CheckStatus
from runnerq_cli.backend.domain.models import MalformedDocument
from runnerq_cli.backend.domain.partitions import FIELD, SHARD_KEY, count_of
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.backend.store.failures import server_away
from runnerq_cli.plural import counted

# What a sharded deployment of a partitioned queue needs, by collection role.
SHARDING: dict[str, str] = {
    "activities": "shard on {partition: 1, _id: 1} (ranged); on MongoDB 7.0 each partition's "
                  "range in one zone",
    "results": "may be sharded on {_id: 'hashed'}",
    "events": "may be sharded on {_id: 'hashed'}",
    "idempotency": "keep unsharded (if sharded: on {_id: 1} only)",
    "dead_letter": "keep unsharded",
    "workers": "must stay unsharded",
    "control": "must stay unsharded",
}
_MUST_NOT = ("workers", "control")
_SHOULD_NOT = ("dead_letter",)
_ALLOWED_KEYS: dict[str, tuple[dict[str, Any], ...]] = {
    "activities": (dict(SHARD_KEY),),
    "results": ({"_id": "hashed"}, {"_id": 1}),
    "events": ({"_id": "hashed"}, {"_id": 1}),
    "idempotency": ({"_id": 1},),
}


def _command(ctx: QueueContext, count: int) -> str:
    return f"runnerq-mongo --queue {ctx.settings.queue} init-indexes --partitions {count}"


def check_partitions(ctx: QueueContext, topology: str | None) -> Check:
    """The count, strays and, on a sharded cluster (`topology` "sharded"), the layout."""
    stored = ctx.partitions.read()
    try:
        partitions = count_of(stored)
    except MalformedDocument as exc:
        return Check("partitions", CheckStatus.FAIL, str(exc),
                     f"set the count again: `{_command(ctx, 2)}` (N at least what it was)",
                     {"stored": stored})
    facts: dict[str, Any] = {"partitions": partitions, "sharding": SHARDING}
    problems: list[str] = []
    warnings: list[str] = []
    fixes: list[str] = []
    if partitions > 1:
        strays = count(ctx.activities, {FIELD: None})  # absent or null: partition_1__id_1
        outside = count(ctx.activities, {"$or": [{FIELD: {"$gte": partitions}},
                                                 {FIELD: {"$lt": 0}}]})
        facts.update(without_partition=strays, outside_partitions=outside)
        if strays:
            problems.append(f"{activities(strays)} without a partition (no claim reaches them)")
            fixes.append(f"run `{_command(ctx, partitions)}` again (it stamps partition 0)")
        if outside:
            problems.append(f"{activities(outside)} in no partition from 0 to "
                            f"{partitions - 1} (never claimed)")
            fixes.append(f"find them with {{partition: {{$gte: {partitions}}}}} and retry or "
                         "delete them (another program's bug?)")
    if topology == "sharded":
        layout = _sharded_layout(ctx)
        facts["sharded"] = layout
        if layout is None:
            warnings.append("config.collections is not readable by this user: the shard "
                            "keys are not checked")
        else:
            _judge(layout, partitions, problems, warnings, fixes, ctx)
    if problems:
        return Check("partitions", CheckStatus.FAIL, "; ".join(problems), "; ".join(fixes),
                     facts)
    if warnings:
        return Check("partitions", CheckStatus.WARN, "; ".join(warnings),
                     "; ".join(fixes) or None, facts)
    if partitions == 1:
        return Check("partitions", CheckStatus.OK,
                     "one partition (to shard the activities, partition the queue first: "
                     "docs/partitions.md)", None, facts)
    where = " on a sharded cluster, laid out as needed" if topology == "sharded" else \
        " (activities: shard on {partition: 1, _id: 1}; workers, control unsharded)"
    return Check("partitions", CheckStatus.OK, f"{counted(partitions, 'partition')}{where}",
                 None, facts)


def _sharded_layout(ctx: QueueContext) -> dict[str, Any] | None:
    """Each collection's shard key (None: unsharded) and the activities' zone ranges, from
    the config database; None when the user may not read it."""
    names = ctx.names.all()
    namespaces = {f"{ctx.db.name}.{name}": role for role, name in names.items()}
    config = ctx.db.sibling("config")
    try:
        keys = {namespaces[d["_id"]]: dict(d.get("key") or {})
                for d in config["collections"].find({"_id": {"$in": list(namespaces)}},
                                                    {"key": 1})
                if d.get("_id") in namespaces}
        zones = config["tags"].count_documents(
            {"ns": f"{ctx.db.name}.{names['activities']}"}, limit=10_000)
    except Exception as exc:
        if server_away(exc):
            raise
        return None
    return {"shard_keys": {role: keys.get(role) for role in names}, "zone_ranges": zones}


def _judge(layout: dict[str, Any], partitions: int, problems: list[str],
           warnings: list[str], fixes: list[str], ctx: QueueContext) -> None:
    """Compare the cluster's layout with SHARDING."""
    keys: dict[str, dict[str, Any] | None] = layout["shard_keys"]
    for role in _MUST_NOT:
        if keys.get(role) is not None:
            problems.append(f"{role} is sharded (it must stay unsharded)")
            fixes.append(f"move {ctx.names.all()[role]} back to an unsharded collection")
    for role in _SHOULD_NOT:
        if keys.get(role) is not None:
            warnings.append(f"{role} is sharded; nothing gains from it")
    for role, allowed in _ALLOWED_KEYS.items():
        key = keys.get(role)
        if key is not None and key not in allowed:
            problems.append(f"{role} is sharded on {key}, not {allowed[0]}")
            fixes.append(f"reshard {ctx.names.all()[role]} on {allowed[0]}")
    activities_key = keys.get("activities")
    if activities_key is not None and partitions == 1:
        problems.append("activities are sharded but the queue has one partition: claims "
                        "go to every shard (refused on MongoDB 7.0)")
        fixes.append("partition the queue (init-indexes --partitions N) before sharding")
    elif activities_key is not None and layout["zone_ranges"] < partitions:
        warnings.append(f"{counted(layout['zone_ranges'], 'zone range')} for "
                        f"{counted(partitions, 'partition')}: "
                        "on MongoDB 7.0 a claim of a partition split over shards is refused")
        fixes.append("put each partition's range [{partition: P, _id: MinKey}, "
                     "{partition: P + 1, _id: MinKey}) in one zone (sh.updateZoneKeyRange)")
    elif activities_key is None and partitions > 1:
        warnings.append("on a sharded cluster, the activities are not sharded yet")
        fixes.append(f"sh.shardCollection('{ctx.db.name}.{ctx.names.all()['activities']}', "
                     "{partition: 1, _id: 1})")

"""Every hinted query is covered by its index: proved from the query shapes, no server.

MongoDB honours a hint to a partial index whose `partialFilterExpression` the query does
not imply, and answers from the index alone: incomplete results, no error (SERVER-26413).
The dev server refuses such a hint, so the suite would not see it. Here a small
implication checker (the shapes the project's queries use: equality, `$in`, `$exists`,
`$gt`/`$gte`/`$lt`/`$lte`, `$and`, `$or`) proves each hinted query implies its index's
filter, and an inventory of the package's hint sites makes a new one fail until it is
listed here. A refused hint is counted and logged once per collection (store/hints.py).
"""

from __future__ import annotations

import ast
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import runnerq_cli
from runnerq_cli.backend.domain import queries
from runnerq_cli.backend.domain.index_specs import EVER, index_plan
from runnerq_cli.backend.store import hints
from runnerq_cli.backend.views import metrics
from runnerq_cli.config import Settings

PACKAGE = Path(runnerq_cli.__file__).parent
NOW = datetime(2026, 1, 1, tzinfo=UTC)
RANGE_OPS = ("$gt", "$gte", "$lt", "$lte")
QUERY_OPS = {"$eq", "$in", "$nin", "$exists", "$type", "$not", "$ne", *RANGE_OPS}


# ------------------------------------------------------------ the checker


def _operators(cond: Any) -> dict[str, Any] | None:
    """A condition's operators, or None for a plain value (equality)."""
    if isinstance(cond, dict) and cond and all(str(k).startswith("$") for k in cond):
        unknown = set(cond) - QUERY_OPS
        if unknown:
            raise ValueError(f"operators the checker does not know: {sorted(unknown)}")
        return cond
    return None


def _conjuncts(query: dict[str, Any]) -> list[tuple[str, Any]]:
    """(field, condition) pairs that must all hold; `$and` flattened."""
    out: list[tuple[str, Any]] = []
    for key, cond in query.items():
        if key == "$and":
            for part in cond:
                out.extend(_conjuncts(part))
        elif key.startswith("$"):
            out.append((key, cond))  # $or and the like: handled by `implies`
        else:
            out.append((key, cond))
    return out


def _comparable(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    return (isinstance(a, numbers) and isinstance(b, numbers)) or type(a) is type(b)


def _satisfies(value: Any, op: str, bound: Any) -> bool:
    """Whether the known value `value` meets `{op: bound}`."""
    if value is None or not _comparable(value, bound):
        return False
    return {"$gt": value > bound, "$gte": value >= bound,
            "$lt": value < bound, "$lte": value <= bound}[op]


def _values(cond: Any) -> list[Any] | None:
    """The values a condition allows when it lists them (equality, `$eq`, `$in`)."""
    ops = _operators(cond)
    if ops is None:
        return [cond]
    if "$eq" in ops:
        return [ops["$eq"]]
    if "$in" in ops:
        return list(ops["$in"])
    return None


def _range_implies(ops: dict[str, Any], op: str, bound: Any) -> bool:
    """Whether the query's own range operators imply `{op: bound}`."""
    for mine, value in ops.items():
        if mine not in RANGE_OPS or not _comparable(value, bound):
            continue
        lower = op in ("$gt", "$gte") and mine in ("$gt", "$gte")
        upper = op in ("$lt", "$lte") and mine in ("$lt", "$lte")
        tighter = (value > bound) if lower else (value < bound)
        inclusive_ok = op in ("$gte", "$lte") or mine in ("$gt", "$lt")
        if (lower or upper) and (tighter or (value == bound and inclusive_ok)):
            return True
    return False


def _field_implies(conds: list[Any], wanted: Any) -> bool:
    """Whether the query's conditions on one field imply the filter's condition."""
    wanted_ops = _operators(wanted)
    if wanted_ops is None or set(wanted_ops) == {"$eq"}:
        target = wanted if wanted_ops is None else wanted_ops["$eq"]
        return any((vals := _values(c)) is not None and vals and all(v == target for v in vals)
                   for c in conds)
    for op, bound in wanted_ops.items():
        if not any(_one_op_implied(c, op, bound) for c in conds):
            return False
    return True


def _one_op_implied(cond: Any, op: str, bound: Any) -> bool:
    ops = _operators(cond)
    values = _values(cond)
    if op == "$in":
        return values is not None and bool(values) and all(v in bound for v in values)
    if op == "$exists":
        if bound:  # a listed non-null value, a comparison with one, or a type other than null
            if values is not None:
                return bool(values) and all(v is not None for v in values)
            assert ops is not None
            return (ops.get("$exists") is True
                    or any(ops.get(r) is not None for r in RANGE_OPS if r in ops)
                    or ("$type" in ops and ops["$type"] not in ("null", 10)))
        return ops is not None and ops.get("$exists") is False
    if op in RANGE_OPS:
        if values is not None:
            return bool(values) and all(_satisfies(v, op, bound) for v in values)
        assert ops is not None
        return _range_implies(ops, op, bound)
    return False  # an operator in a filter this checker does not prove: not implied


def implies(query: dict[str, Any], filter_: dict[str, Any]) -> bool:
    """Whether every document `query` matches also matches `filter_` (sound, not complete:
    False where it cannot tell)."""
    pairs = _conjuncts(query)
    for key, cond in pairs:  # an $or whose every branch implies the filter implies it
        if key == "$or" and all(implies({**_plain(pairs), **branch}, filter_) for branch in cond):
            return True
    for key, wanted in _conjuncts(filter_):
        if key == "$or":
            if not any(implies(query, branch) for branch in wanted):
                return False
            continue
        if key.startswith("$"):
            return False
        if not _field_implies([c for k, c in pairs if k == key], wanted):
            return False
    return True


def _plain(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The field conditions of `pairs` as one query (one per field: enough for `$or`)."""
    return {"$and": [{k: c} for k, c in pairs if not k.startswith("$")]}


def effective_filter(query: queries.Query) -> dict[str, Any]:
    """What an aggregation's leading `$match` stages select (or a find's filter)."""
    if query.pipeline is None:
        return query.filter
    stages = []
    for stage in query.pipeline:
        if "$match" not in stage:
            break
        stages.append(stage["$match"])
    return {"$and": stages}


# ----------------------------------------------------- the checker itself


@pytest.mark.parametrize(("query", "filter_", "expected"), [
    ({"status": "pending"}, {"status": "pending"}, True),
    ({"status": "pending", "activity_type": {"$in": ["a"]}}, {"status": "pending"}, True),
    ({"status": {"$in": ["pending"]}}, {"status": "pending"}, True),
    ({"status": {"$in": ["pending", "scheduled"]}}, {"status": "pending"}, False),
    ({"activity_type": "a"}, {"status": "pending"}, False),
    ({"status": "processing"}, {"status": "pending"}, False),
    ({"completed_at": {"$gte": EVER}}, {"completed_at": {"$exists": True}}, True),
    ({"completed_at": {"$lt": NOW}}, {"completed_at": {"$exists": True}}, True),
    ({"completed_at": {"$gte": None}}, {"completed_at": {"$exists": True}}, False),
    ({"completed_at": {"$ne": None}}, {"completed_at": {"$exists": True}}, False),
    ({"completed_at": {"$exists": True}}, {"completed_at": {"$exists": True}}, True),
    ({"completed_at": {"$type": "date"}}, {"completed_at": {"$exists": True}}, True),
    ({"status": "completed"}, {"completed_at": {"$exists": True}}, False),
    ({"$and": [{"status": {"$in": ["a", "b"]}}, {"status": "a"}]}, {"status": "a"}, True),
    ({"$or": [{"status": "a"}, {"status": "b"}]}, {"status": {"$in": ["a", "b"]}}, True),
    ({"$or": [{"status": "a"}, {"other": 1}]}, {"status": {"$in": ["a", "b"]}}, False),
    ({"n": {"$gt": 5}}, {"n": {"$gte": 5}}, True),
    ({"n": {"$gte": 5}}, {"n": {"$gt": 5}}, False),
    ({"n": {"$gte": 6, "$lt": 9}}, {"n": {"$gt": 5, "$lte": 9}}, True),
    ({"n": 7}, {"n": {"$gt": 5, "$lte": 9}}, True),
    ({"n": "7"}, {"n": {"$gt": 5}}, False),  # another BSON type: no order across types
    ({"x": 1}, {"$and": [{"x": 1}, {"y": 2}]}, False),
])
def test_the_checker_proves_only_what_holds(query: dict[str, Any], filter_: dict[str, Any],
                                            expected: bool) -> None:
    assert implies(query, filter_) is expected


def test_the_checker_refuses_operators_it_does_not_know() -> None:
    with pytest.raises(ValueError, match=r"\$regex"):
        implies({"status": {"$regex": "p"}}, {"status": "pending"})


# ------------------------------------------------------ the project's hints


def hinted_queries(settings: Settings) -> list[tuple[str, dict[str, Any], str]]:
    """(what, filter, index name) of every read the code sends with a hint."""
    since = NOW - timedelta(minutes=15)
    out = [(q.name, effective_filter(q), str(q.index(settings)))
           for q in [*queries.status_counts(), queries.completed_counts(10),
                     queries.completions_since(since), *queries.type_presence("t"),
                     queries.running_leases(["0" * 32]), *queries.doctor_waits()]]
    out.append(("stats pending counts by type (metrics._grouped)",
                effective_filter(queries.status_counts()[0]),
                queries.index_name(settings, metrics.PENDING_BY_TYPE_PURPOSE)))
    out += [(f"doctor explains {q.name}", effective_filter(q), str(q.index(settings)))
            for q in queries.representative_queries(settings, NOW) if q.hinted]
    return out


def test_every_hinted_query_implies_its_index_filter() -> None:
    settings = Settings()
    partial = {spec.name: spec.options.get("partialFilterExpression")
               for spec in index_plan(settings)}
    checked = hinted_queries(settings)
    assert len(checked) >= 15
    for what, filter_, index in checked:
        assert index in partial, f"{what}: hints {index}, which the plan does not have"
        expression = partial[index]
        if expression is not None:
            assert implies(filter_, expression), (
                f"{what}: {filter_} does not imply {index}'s filter {expression}: MongoDB "
                "would answer it incompletely (SERVER-26413)")


# Where the package passes a hint, and which of the above covers it. A new site fails
# here until its queries are added to `hinted_queries`.
HINT_SITES = {
    ("backend/store/hints.py", "hinted_aggregate"): "the helper itself",
    ("backend/ops/control.py", "seen_type"): "queries.type_presence",
    ("backend/diagnosis/plans.py", "explain_query"): "representative_queries, hinted",
    ("backend/queue/flow_claims.py", "_repaired"): "queries.running_leases",
    ("backend/diagnosis/wait_checks.py", "_found"): "queries.doctor_waits",
}
HINTED_CALLERS = {"_grouped": "status_counts, completed_counts, by type",
                  "history": "completions_since"}


def _hint_sites() -> tuple[set[tuple[str, str]], set[str]]:
    sites: set[tuple[str, str]] = set()
    callers: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        rel = str(path.relative_to(PACKAGE))
        tops = [n for n in tree.body if isinstance(n, ast.FunctionDef)] + [
            m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
            if isinstance(m, ast.FunctionDef)]  # nested functions count as their outer one
        for func in tops:
            for node in ast.walk(func):
                hint_kw = isinstance(node, ast.Call) and any(
                    k.arg == "hint" and not isinstance(k.value, ast.Constant)
                    for k in node.keywords)
                hint_key = (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                            and node.slice.value == "hint")
                hint_call = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                             and node.func.attr == "hint"
                             and rel not in ("backend/store/driver.py",  # the wrappers
                                             "backend/store/cursors.py"))
                if hint_kw or hint_key or hint_call:
                    sites.add((rel, func.name))
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ("_hinted", "hinted_aggregate", "hinted")
                        and rel == "backend/views/metrics.py"):
                    callers.add(func.name)
    return sites, callers


def test_every_hint_site_is_listed() -> None:
    sites, callers = _hint_sites()
    assert sites - {("backend/views/metrics.py", "_hinted")} == set(HINT_SITES)
    assert callers - {"_hinted"} == set(HINTED_CALLERS)


# ------------------------------------------------- a refused hint is counted


def test_a_refused_hint_is_counted_exposed_and_logged_once(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    """A queue whose indexes were never created: the dev server refuses the hints, the
    counts are still exact (read without them), and the fallback is counted and told."""
    from runnerq_cli.backend.api import RunnerQ
    from runnerq_cli.cli.exposition import QueueCollector, registry_for

    backend = RunnerQ(settings)  # no init_indexes
    backend.enqueue("t", {})
    index = queries.index_name(settings, metrics.PENDING_BY_TYPE_PURPOSE)
    before = hints.fallbacks().get(index, 0)
    with caplog.at_level(logging.WARNING, logger="runnerq.backend"):
        first = backend.inspector.metrics_sample()
        second = backend.inspector.metrics_sample()
    assert sum(r["count"] for r in second["activities"] if r["status"] == "pending") == 1
    assert second["hint_fallbacks"][index] - before == 2
    assert first["hint_fallbacks"][index] < second["hint_fallbacks"][index]
    # One line for the queue's collection, however many of its hints were refused: which
    # collection, the server's reason without pymongo's dump, and the command to run.
    collection = f"runnerq_{settings.queue}_activities"
    told = [r.getMessage() for r in caplog.records if f" on {collection} " in r.getMessage()]
    assert len(told) <= 1 and (before > 0 or len(told) == 1)
    for line in told:
        assert f"`runnerq-mongo --queue {settings.queue} init-indexes`" in line
        assert "full error" not in line and "\n" not in line
    from prometheus_client.exposition import generate_latest

    collector = QueueCollector(lambda: [settings.queue], lambda _name: backend)
    text = generate_latest(registry_for(collector)).decode()
    assert f'runnerq_hint_fallbacks{{index="{index}"}}' in text

"""Query plans: does an index serve each query the code runs (queries.py)?

`explain_query` asks the server for a query's plan; `plan_stages` and
`plan_problems` read MongoDB's answer (None: not MongoDB's format, as on the
dev server, where nothing can be concluded).
"""

from __future__ import annotations

from typing import Any

from runnerq_cli.backend.domain.naming import CollectionNames
from runnerq_cli.backend.domain.queries import Query
from runnerq_cli.backend.store.driver import Database
from runnerq_cli.config import Settings


def plan_stages(explained: dict[str, Any]) -> list[str] | None:
    """Stage names of every winning plan in a MongoDB `explain` answer, or None.

    None: the answer is not MongoDB's format (no `queryPlanner.winningPlan`),
    as on the dev server: nothing can be concluded from it.
    """
    plans: list[dict[str, Any]] = []

    def find_plans(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "winningPlan" and isinstance(value, dict):
                    plans.append(value)
                elif key != "rejectedPlans":
                    find_plans(value)
        elif isinstance(node, list):
            for item in node:
                find_plans(item)

    def stages(node: Any, out: list[str]) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("stage"), str):
                out.append(node["stage"])
            for key, value in node.items():
                if key in ("inputStage", "inputStages", "queryPlan", "shards", "innerStage",
                           "outerStage", "thenStage", "elseStage") or key == "winningPlan":
                    stages(value, out)
        elif isinstance(node, list):
            for item in node:
                stages(item, out)

    find_plans(explained)
    if not plans:
        return None
    out: list[str] = []
    for plan in plans:
        stages(plan, out)
    return out


def plan_problems(stage_names: list[str]) -> list[str]:
    """What makes a plan unbounded: a collection scan, an in-memory sort."""
    problems = []
    if "COLLSCAN" in stage_names:
        problems.append("collection scan")
    if "SORT" in stage_names:
        problems.append("in-memory sort")
    return problems


def explain_query(db: Database, names: CollectionNames, settings: Settings,
                  query: Query) -> dict[str, Any]:
    """The server's query plan of `query` (an aggregation with its hint, or a find)."""
    collection = names.all()[query.role]
    if query.pipeline is not None:
        command: dict[str, Any] = {"aggregate": collection, "pipeline": list(query.pipeline),
                                   "cursor": {}}
        if query.hinted:
            command["hint"] = query.index(settings)
    else:
        command = {"find": collection, "filter": query.filter, "limit": 1}
        if query.sort:
            command["sort"] = dict(query.sort)
    return db.command("explain", command, verbosity="queryPlanner",
                      codec_options=db.codec_options)

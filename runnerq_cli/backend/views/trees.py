"""Trees of durable activities as people read them (docs/design.md, "Durable activities"):
what a waiting activity waits for, and a whole tree with every member's steps.

`tree` is two reads whatever the tree's size: the subtree (the root and every activity
with its `root_activity_id`, `root_activity_id_1`) and the steps of all its members (one
query on the checkpoints, `owner_id_1_created_at_1`). A wait is described from the
fields a park wrote (`parked`, `waiting_result_id`, `scheduled_at`) and, for an await,
the state of the activity producing the result: never from events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runnerq_cli.backend.domain.checkpoints import Step
from runnerq_cli.backend.domain.models import (
    Status,
    display_status,
    parse_activity_id,
    to_jsonable,
)
from runnerq_cli.backend.domain.waits import Wait, wait_of
from runnerq_cli.backend.store.context import Part
from runnerq_cli.errors import NotFound

# What a tree shows of each member (never the payload or the outbox).
MEMBER_FIELDS = {"activity_type": 1, "status": 1, "retry_count": 1, "depth": 1,
                 "parent_activity_id": 1, "root_activity_id": 1, "created_at": 1,
                 "scheduled_at": 1, "parked": 1, "waiting_result_id": 1, "worker_id": 1,
                 "completed_at": 1, "last_error": 1}
# A tree larger than this is shown in part (the first members by depth, then age).
MAX_MEMBERS = 2000
# Operator cancel reaches these (a running one is its worker's).
CANCELLABLE = (Status.PENDING.value, Status.SCHEDULED.value, Status.WAITING.value)


@dataclass(frozen=True)
class Member:
    """One activity of a tree, with its steps and its wait."""

    doc: Mapping[str, Any]
    steps: list[Step] = field(default_factory=list)
    wait: Wait | None = None

    @property
    def id(self) -> uuid.UUID:
        return self.doc["_id"]  # type: ignore[no-any-return]

    @property
    def depth(self) -> int:
        value = self.doc.get("depth")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def status(self) -> str:
        status = str(self.doc.get("status"))
        return display_status(status, int(self.doc.get("retry_count") or 0))

    def to_json(self) -> dict[str, Any]:
        parent = self.doc.get("parent_activity_id")
        return {"id": str(self.id), "activity_type": self.doc.get("activity_type"),
                "status": self.doc.get("status"), "display_status": self.status,
                "depth": self.depth, "parent_activity_id": str(parent) if parent else None,
                "created_at": to_jsonable(self.doc.get("created_at")),
                "completed_at": to_jsonable(self.doc.get("completed_at")),
                "worker_id": self.doc.get("worker_id"),
                "last_error": self.doc.get("last_error"),
                "waiting": self.wait.to_json() if self.wait else None,
                "steps": [s.to_json() for s in self.steps]}


@dataclass(frozen=True)
class Tree:
    """A whole tree: its root's id, the asked-for member, and every member by depth."""

    root_id: uuid.UUID
    asked: uuid.UUID
    members: list[Member]
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"root_id": str(self.root_id), "id": str(self.asked),
                "members": [m.to_json() for m in self.members], "truncated": self.truncated}


class Trees(Part):
    """Reads of durable activities' trees and waits (reached as `rq.trees`)."""

    def tree(self, activity_id: uuid.UUID | str) -> Tree:
        """The whole tree of any of its members: its root and every descendant, each with
        its steps and what it waits for. NotFound for an unknown id."""
        aid = parse_activity_id(activity_id)
        doc = self._ctx.activities.find_one({"_id": aid}, {"root_activity_id": 1})
        if doc is None:
            raise NotFound(f"activity {aid} not found")
        root = doc.get("root_activity_id") or aid
        docs = list(self._ctx.activities.find(
            {"$or": [{"_id": root}, {"root_activity_id": root}]}, MEMBER_FIELDS)
            .limit(MAX_MEMBERS + 1))
        truncated = len(docs) > MAX_MEMBERS
        docs = _ordered(docs[:MAX_MEMBERS])
        steps = self._steps_of([d["_id"] for d in docs])
        by_id = {d["_id"]: d for d in docs}
        producers = self._producers([d for d in docs if d.get("waiting_result_id") is not None
                                     and d["waiting_result_id"] not in by_id])
        producers.update(by_id)
        members = [Member(d, steps.get(d["_id"], []),
                          wait_of(d, producers.get(d.get("waiting_result_id"))))
                   for d in docs]
        return Tree(root, aid, members, truncated)

    def wait(self, doc: Mapping[str, Any]) -> Wait | None:
        """What one waiting activity (its document) waits for: one read for an await."""
        if doc.get("status") != Status.WAITING.value:
            return None
        producers = self._producers([doc]) if doc.get("waiting_result_id") else {}
        return wait_of(doc, producers.get(doc.get("waiting_result_id")))

    def waits(self, docs: Iterable[Mapping[str, Any]]) -> list[Wait | None]:
        """What each of these activities waits for (None for one not waiting), with one
        read of all their awaited producers (`list waiting`'s page)."""
        docs = list(docs)
        producers = self._producers([d for d in docs if d.get("status") == Status.WAITING.value
                                     and d.get("waiting_result_id") is not None])
        return [wait_of(d, producers.get(d.get("waiting_result_id"))) for d in docs]

    def _producers(self, docs: Iterable[Mapping[str, Any]]) -> dict[Any, dict[str, Any]]:
        ids = list({d["waiting_result_id"] for d in docs})
        if not ids:
            return {}
        return {p["_id"]: p for p in self._ctx.activities.find(
            {"_id": {"$in": ids}}, {"status": 1, "retry_count": 1, "worker_id": 1})}

    def _steps_of(self, owners: list[uuid.UUID]) -> dict[uuid.UUID, list[Step]]:
        """The steps of every owner, in one query, oldest first."""
        found: dict[uuid.UUID, list[Step]] = {}
        for doc in self._ctx.checkpoints.find(
                {"owner_id": {"$in": owners}}).sort([("created_at", 1), ("_id", 1)]):
            step = doc.get("step")
            if not isinstance(step, str):
                continue
            kind, _, name = step.partition(":")
            found.setdefault(doc["owner_id"], []).append(
                Step(kind, name, str(doc.get("state")), doc.get("data"),
                     doc.get("created_at"), doc["_id"]))
        return found

    def cancellable_descendants(self, ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
        """Every descendant of `ids` (walking `parent_activity_id`, one query per
        generation) that an operator cancel reaches: not terminal, not running. The
        children of a running or finished one are walked too."""
        frontier = list(dict.fromkeys(ids))
        seen = set(frontier)
        found: list[uuid.UUID] = []
        while frontier:
            children = list(self._ctx.activities.find(
                {"parent_activity_id": {"$in": frontier}}, {"status": 1}).sort(
                    [("created_at", 1), ("_id", 1)]))
            frontier = []
            for child in children:
                if child["_id"] in seen:
                    continue
                seen.add(child["_id"])
                frontier.append(child["_id"])
                if child.get("status") in CANCELLABLE:
                    found.append(child["_id"])
        return found


def _ordered(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Members as a tree reads: each parent followed by its children (oldest first), so
    indentation by depth shows who spawned whom. An orphan (its parent gone) follows, and
    so does every member of a parent cycle (documents another program or a hand edit left
    naming each other as parent), each once: a member is never left out of its tree."""
    def age(doc: Mapping[str, Any]) -> tuple[str, str]:
        return (str(to_jsonable(doc.get("created_at"))), str(doc["_id"]))
    children: dict[Any, list[dict[str, Any]]] = {}
    ids = {d["_id"] for d in docs}
    by_age = sorted(docs, key=age)
    for doc in by_age:
        parent = doc.get("parent_activity_id")
        children.setdefault(parent if parent in ids and parent != doc["_id"] else None,
                            []).append(doc)
    out: list[dict[str, Any]] = []
    placed: set[Any] = set()
    starts = children.get(None, []) + by_age  # then whatever a cycle kept unreached
    for start in starts:
        stack = [start]
        while stack:
            doc = stack.pop()
            if doc["_id"] in placed:
                continue
            placed.add(doc["_id"])
            out.append(doc)
            stack.extend(reversed(children.get(doc["_id"], [])))
    return out


__all__ = ["Member", "Tree", "Trees", "Wait", "wait_of"]

"""Retention by tree (docs/design.md, "Tree retention"): a root past its group's age goes
with its whole tree once no member is live and no live tree elsewhere waits on one of its
results; children never go on their own. A plain activity is a tree of one.

What a tree owns goes first (checkpoints, results, events, idempotency keys,
dependencies), then its members, then the root, deleted with the retention query again so
one revived meanwhile stays; each root deleted is counted by the delete that removed it, so
concurrent purges never count a tree twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from runnerq_cli.backend.domain.models import TERMINAL_STATUSES
from runnerq_cli.backend.store.context import Part

TERMINAL = [s.value for s in TERMINAL_STATUSES]
# What a candidate's deletion needs to know of each member.
MEMBER_FIELDS = {"_id": 1, "status": 1, "root_activity_id": 1, "activity_type": 1,
                 "idempotency_key": 1}


class TreeRetention(Part):
    """Deletes whole trees past their retention (the purge chore, `purge`, `cleanup`)."""

    def purge(self, query: Mapping[str, Any], batch: int, pages: int = 5) -> int:
        """Delete up to `batch` trees whose root matches the retention `query` (roots
        only: queries.retention_of), oldest first; returns how many roots this call
        deleted. Roots kept (a live member, pinned) are stepped over, page by page (at
        most `pages`), so old trees that must stay never hold back younger ones."""
        deleted = 0
        after: tuple[Any, Any] | None = None
        for _ in range(pages):
            page = dict(query)
            if after is not None:  # keyset: past the last root looked at
                page["$or"] = [{"completed_at": {"$gt": after[0]}},
                               {"completed_at": after[0], "_id": {"$gt": after[1]}}]
            roots = list(self._ctx.activities.find(page, MEMBER_FIELDS | {"completed_at": 1})
                         .sort([("completed_at", 1), ("_id", 1)]).limit(batch - deleted))
            if not roots:
                break
            deleted += self._delete_trees(query, roots)
            if deleted >= batch or len(roots) < batch:
                break
            after = (roots[-1]["completed_at"], roots[-1]["_id"])
        return deleted

    def _delete_trees(self, query: Mapping[str, Any], roots: list[dict[str, Any]]) -> int:
        """The trees of `roots` that may go: what they own, then their children, then the
        roots (with the retention query again)."""
        trees = self._trees(roots)
        doomed = [root for root, members in trees.items()
                  if all(m.get("status") in TERMINAL for m in members)]
        doomed = self._unpinned(doomed, trees)
        if not doomed:
            return 0
        members = [m for root in doomed for m in trees[root]]
        self._delete_owned(members)
        children = [m["_id"] for m in members if m["_id"] not in set(doomed)]
        if children:
            self._ctx.activities.delete_many({"_id": {"$in": children},
                                              "status": {"$in": TERMINAL}})
        gone = self._ctx.activities.delete_many({**query, "_id": {"$in": doomed}})
        return gone.deleted_count

    def _trees(self, roots: list[dict[str, Any]]) -> dict[uuid.UUID, list[dict[str, Any]]]:
        """Each root's tree: the root and every activity naming it as its root (one read)."""
        trees: dict[uuid.UUID, list[dict[str, Any]]] = {r["_id"]: [r] for r in roots}
        for doc in self._ctx.activities.find(
                {"root_activity_id": {"$in": list(trees)}}, MEMBER_FIELDS):
            trees[doc["root_activity_id"]].append(doc)
        return trees

    def _unpinned(self, roots: list[uuid.UUID],
                  trees: Mapping[uuid.UUID, list[dict[str, Any]]]) -> list[uuid.UUID]:
        """The roots no live tree elsewhere waits on: a dependency whose producer is in
        the tree and whose waiter is outside it, in a tree with a non-terminal member."""
        tree_of = {m["_id"]: root for root in roots for m in trees[root]}
        deps = [d for d in self._ctx.dependencies.find(
            {"producer_id": {"$in": list(tree_of)}}, {"waiter_id": 1, "producer_id": 1})
            if d.get("waiter_id") not in tree_of]
        if not deps:
            return roots
        waiters = {d["waiter_id"] for d in deps}
        waiter_roots = {doc["_id"]: doc.get("root_activity_id") or doc["_id"]
                        for doc in self._ctx.activities.find(
                            {"_id": {"$in": list(waiters)}}, {"root_activity_id": 1})}
        outside = set(waiter_roots.values())
        live = {doc.get("root_activity_id") or doc["_id"] for doc in self._ctx.activities.find(
            {"$or": [{"_id": {"$in": list(outside)}},
                     {"root_activity_id": {"$in": list(outside)}}],
             "status": {"$nin": TERMINAL}}, {"root_activity_id": 1})}
        pinned = {tree_of[d["producer_id"]] for d in deps
                  if waiter_roots.get(d["waiter_id"]) in live}
        return [root for root in roots if root not in pinned]

    def _delete_owned(self, members: Iterable[Mapping[str, Any]]) -> None:
        """What the members own: checkpoints, results, events, keys, dependencies."""
        members = list(members)
        ids = [m["_id"] for m in members]
        self._ctx.checkpoints.delete_many({"owner_id": {"$in": ids}})
        self._ctx.results.delete_many({"_id": {"$in": ids}})
        self._ctx.events.delete_many({"activity_id": {"$in": ids}})
        self._ctx.dependencies.delete_many({"waiter_id": {"$in": ids}})
        self._ctx.dependencies.delete_many({"producer_id": {"$in": ids}})
        keys = [{"_id": {"activity_type": m["activity_type"], "key": m["idempotency_key"]},
                 "activity_id": m["_id"]} for m in members
                if isinstance(m.get("idempotency_key"), str)
                and isinstance(m.get("activity_type"), str)]
        if keys:
            self._ctx.idempotency.delete_many({"$or": keys})

    def trim_events(self, older_than: datetime, limit: int = 1000) -> int:
        """The spec's events window: delete stored events older than `older_than` of
        activities that are terminal (or gone); returns how many."""
        ids = {doc["activity_id"] for doc in self._ctx.events.find(
            {"timestamp": {"$lt": older_than}, "activity_id": {"$ne": None}},
            {"activity_id": 1}).limit(limit)}
        if not ids:
            return 0
        live = {doc["_id"] for doc in self._ctx.activities.find(
            {"_id": {"$in": list(ids)}, "status": {"$nin": TERMINAL}}, {"_id": 1})}
        done = [i for i in ids if i not in live]
        if not done:
            return 0
        return self._ctx.events.delete_many(
            {"activity_id": {"$in": done}, "timestamp": {"$lt": older_than}}).deleted_count

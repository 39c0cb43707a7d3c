"""The worker registry: who is working on a queue, seen by operators.

One document per worker process in `runnerq_{queue}_workers` (our addition to the
data contract, docs/design.md "Workers"; other programs may ignore it):

    _id             worker id (string)
    host, pid       where it runs
    queue           queue name
    types           activity types it claims ([] = all: started with --all-types)
    concurrency     activities at once
    started_at      date
    last_heartbeat  date (a TTL index removes entries silent for TIMING.registry_ttl)
    in_flight       activities running now
    counters        {claimed, succeeded, retried, failed, dead_lettered, claims_lost,
                     released}
    version         runnerq-mongo version

A worker registers at start, heartbeats every TIMING.heartbeat_every seconds, and removes its
entry on a clean stop. An entry whose heartbeat is older than `stale_after`
is shown as stale (the process probably died).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runnerq_cli.backend.domain.naming import COUNTERS
from runnerq_cli.backend.domain.timing import TIMING
from runnerq_cli.backend.store.context import QueueContext
from runnerq_cli.version import __version__


@dataclass(frozen=True)
class WorkerInfo:
    worker_id: str
    host: str
    pid: int
    queue: str
    types: list[str]
    concurrency: int
    started_at: datetime | None  # None: a stray entry without it (stale)
    last_heartbeat: datetime | None
    in_flight: int
    counters: dict[str, int] = field(default_factory=dict)
    version: str | None = None
    stale: bool = False

    @classmethod
    def from_doc(cls, doc: dict[str, Any], now: datetime, stale_after: float) -> WorkerInfo:
        from runnerq_cli.backend.domain.shapes import WORKER

        WORKER.check(doc)  # MalformedDocument: list_workers skips it
        last = doc.get("last_heartbeat") or doc.get("started_at")
        return cls(
            worker_id=str(doc["_id"]), host=doc.get("host", "?"), pid=int(doc.get("pid", 0)),
            queue=doc.get("queue", "?"), types=list(doc.get("types") or []),
            concurrency=int(doc.get("concurrency", 0)), started_at=doc.get("started_at"),
            last_heartbeat=last, in_flight=int(doc.get("in_flight", 0)),
            counters={name: int((doc.get("counters") or {}).get(name, 0)) for name in COUNTERS},
            version=doc.get("version"),
            stale=last is None or last < now - timedelta(seconds=stale_after),
        )

    def to_json(self) -> dict[str, Any]:
        from runnerq_cli.backend.domain.models import to_jsonable

        json: dict[str, Any] = to_jsonable(self.__dict__)
        return json


class WorkerRegistry:
    """Register, heartbeat, unregister and list workers of one queue."""

    def __init__(self, ctx: QueueContext) -> None:
        self._ctx = ctx

    def register_worker(self, worker_id: str, *, types: list[str] | tuple[str, ...] = (),
                        concurrency: int = 1) -> None:
        from runnerq_cli.texts import worker_id as checked_worker_id

        checked_worker_id(worker_id)  # InvalidArgument: nothing written
        now = self._ctx.clock()
        self._ctx.workers.replace_one({"_id": worker_id}, {
            "_id": worker_id, "host": socket.gethostname(), "pid": os.getpid(),
            "queue": self._ctx.settings.queue, "types": list(types), "concurrency": concurrency,
            "started_at": now, "last_heartbeat": now, "in_flight": 0,
            "counters": dict.fromkeys(COUNTERS, 0), "version": __version__,
        }, upsert=True)

    def heartbeat_worker(self, worker_id: str, *, in_flight: int,
                         counters: dict[str, int]) -> None:
        """Refresh the entry (re-creating it if the TTL monitor removed it)."""
        now = self._ctx.clock()
        self._ctx.workers.update_one(
            {"_id": worker_id},
            {"$set": {"last_heartbeat": now, "in_flight": in_flight,
                      "counters": {name: int(counters.get(name, 0)) for name in COUNTERS},
                      "host": socket.gethostname(), "pid": os.getpid(),
                      "queue": self._ctx.settings.queue},
             "$setOnInsert": {"started_at": now, "version": __version__}},
            upsert=True)

    def unregister_worker(self, worker_id: str) -> None:
        self._ctx.workers.delete_one({"_id": worker_id})

    def count_live_workers(self, stale_after: float = TIMING.worker_stale_after) -> int:
        """Workers whose heartbeat is fresh: the size of the fleet sharing maintenance."""
        from runnerq_cli.backend.domain.queries import live_workers

        return self._ctx.workers.count_documents(
            live_workers(self._ctx.clock(), stale_after).filter)

    def worker_entries(self, stale_after: float = TIMING.worker_stale_after
                       ) -> tuple[list[WorkerInfo], list[dict[str, Any]]]:
        """`list_workers`, and the entries it leaves out as malformed, each as `{"worker_id"
        (the `_id` as text), "problem", "stale"}`: stale as `stats` counts it (a heartbeat,
        or else a start, that is not a recent date), so the two views count the same."""
        from runnerq_cli.backend.domain.models import MalformedDocument

        now = self._ctx.clock()
        cutoff = now - timedelta(seconds=stale_after)
        good: list[WorkerInfo] = []
        bad: list[dict[str, Any]] = []
        for doc in self._ctx.workers.find().sort([("last_heartbeat", -1)]):
            try:
                good.append(WorkerInfo.from_doc(doc, now, stale_after))
            except MalformedDocument as exc:
                last = doc.get("last_heartbeat") or doc.get("started_at")
                fresh = isinstance(last, datetime) and last >= cutoff
                bad.append({"worker_id": str(doc.get("_id")), "problem": exc.problem,
                            "stale": not fresh})
        return good, bad

    def list_workers(self, stale_after: float = TIMING.worker_stale_after) -> list[WorkerInfo]:
        """Every registered worker, freshest first, stale ones marked."""
        now = self._ctx.clock()
        from runnerq_cli.backend.domain.shapes import readable

        docs = self._ctx.workers.find().sort([("last_heartbeat", -1)])
        return readable(docs, lambda doc: WorkerInfo.from_doc(doc, now, stale_after),
                        self._ctx.workers.name)[0]

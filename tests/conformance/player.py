"""Plays one scenario of our format (tests/conformance/README.md) through conformance
drivers and checks every expectation on the documents they wrote.

Like the spec's runner, it owns the ids (a name stands for a UUID chosen on first use),
the claims (`{id, token}` as a driver returned them), the fixtures (applied to our
documents directly) and every check; the drivers only perform operations.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.database import Database

from runnerq_cli.backend.api import RunnerQ
from tests.conformance import events_schema
from tests.conformance.driver_process import DriverProcess
from tests.conformance.mapping import Matcher, column, own_result, shown, subset

# Step types the spec's 0.7 no longer stores: ours derives (or materializes, or for
# LeaseExtended stores) them. An `events` expectation naming one is met by our step of
# that type; one it does not name is left out (docs/design.md, "Stored and derived").
DERIVED_TYPES = frozenset({"Enqueued", "Scheduled", "Dequeued", "Started", "Completed",
                           "ResultStored", "LeaseExtended"})
OPS = ("submit", "claim", "renew", "complete", "fail", "checkpoint", "depend", "park",
       "signal", "lookup", "reap", "cleanup")
STEP_KEYS = ("refused", "by", "existing", "gets", "renewed", "outcome", "holder", "count")


def business_key(key: str, activity_type: str) -> str:
    """The spec's BusinessKey, written here again: the runner encodes keys itself."""
    data = f"{len(key.encode())}:{key}{activity_type}".encode()
    return "rq:key:v2:" + base64.b64encode(data).decode().rstrip("=")


class Player:
    """One scenario on one fresh queue: its names, its claims, its checks."""

    def __init__(self, drivers: dict[str, DriverProcess], db: Database[Any], queue: str,
                 views: RunnerQ) -> None:
        self.drivers, self.db, self.queue, self.views = drivers, db, queue, views
        self.ids: dict[str, uuid.UUID] = {}
        self.claims: dict[str, dict[str, str]] = {}
        self.notes: set[str] = set()  # design.md's extensions the scenario's events used
        self.match = Matcher(self.ref, self.token, self.checkpoint)

    # ------------------------------------------------------------ names

    def ref(self, name: str) -> uuid.UUID:
        return self.ids.setdefault(str(name), uuid.uuid4())

    def token(self, name: str) -> str:
        assert name in self.claims, f"no claim named {name}"
        return self.claims[name]["token"]

    def checkpoint(self, spec: list[str]) -> uuid.UUID:
        """checkpoint_id(activity, kind, name): UUIDv5 in the activity's namespace."""
        name, kind, step = spec
        return uuid.uuid5(self.ref(name), f"{kind}:{step}")

    def result_id(self, ref: Any) -> uuid.UUID:
        return self.checkpoint(ref["checkpoint"]) if isinstance(ref, dict) else self.ref(ref)

    def coll(self, what: str) -> Any:
        return self.db[f"runnerq_{self.queue}_{what}"]

    # ------------------------------------------------------------ playing

    def play(self, steps: list[dict[str, Any]]) -> None:
        for number, step in enumerate(steps, 1):
            verb = next(iter(step))
            try:
                if verb in OPS:
                    self.operation(verb, step)
                elif verb in ("submit_many", "drain"):
                    getattr(self, verb)(step[verb])
                else:
                    getattr(self, "do_" + verb)(step)
            except AssertionError as exc:
                raise AssertionError(f"step {number} {step}: {exc}{self._logs()}") from None
        self.check_stored_events()

    def _logs(self) -> str:
        return "".join(d.log() for d in self.drivers.values())

    def operation(self, verb: str, step: dict[str, Any]) -> None:
        args = getattr(self, "args_" + verb)(step)
        op = {"depend": "register_dependency", "lookup": "lookup_key"}.get(verb, verb)
        driver = self.drivers[step.get("by", "first")]
        reply = driver.call(op, args)
        if "refused" in step:
            got = reply.get("error", {}).get("kind")
            assert got == step["refused"], f"want error {step['refused']}, got {reply}"
            return
        assert "ok" in reply, f"{reply['error']['kind']}: {reply['error']['message']}"
        self.check_reply(verb, step, reply["ok"])

    def check_reply(self, verb: str, step: dict[str, Any], ok: dict[str, Any]) -> None:
        if verb == "claim":
            got = ok["claims"]
            for name, claim in zip(step[verb], got, strict=False):
                self.claims[name] = claim
            if "gets" in step:
                want = [str(self.ref(n)) for n in step["gets"]]
                assert [c["id"] for c in got] == want, \
                    f"claims {self._names([c['id'] for c in got])}, want {step['gets']}"
        if verb == "submit":
            want = str(self.ref(step["existing"])) if "existing" in step else None
            assert ok.get("existing") == want, f"existing = {ok.get('existing')}, want {want}"
        for key, field in (("renewed", "renewed"), ("outcome", "outcome"), ("count", "count")):
            if key in step:
                assert ok.get(field) == step[key], f"{field} = {ok.get(field)}, want {step[key]}"
        if "holder" in step:
            assert ok.get("id") == str(self.ref(step["holder"])), \
                f"id = {ok.get('id')}, want {step['holder']}"

    def _names(self, ids: list[str]) -> list[str]:
        names = {str(v): k for k, v in self.ids.items()}
        return [names.get(i, i) for i in ids]

    # ------------------------------------------------------------ arguments

    def _rest(self, step: dict[str, Any], verb: str) -> dict[str, Any]:
        return {k: v for k, v in step.items() if k != verb and k not in STEP_KEYS}

    def args_submit(self, step: dict[str, Any]) -> dict[str, Any]:
        args = self._rest(step, "submit")
        args["id"] = str(self.ref(step["submit"]))
        for name in ("parent", "root"):
            if name in args:
                args[name] = str(self.ref(args[name]))
        if "fence" in args:
            args["fence"] = self.claims[args["fence"]]
        return args

    def args_claim(self, step: dict[str, Any]) -> dict[str, Any]:
        return self._rest(step, "claim")

    def _claimed(self, step: dict[str, Any], verb: str) -> dict[str, Any]:
        assert step[verb] in self.claims, f"no claim named {step[verb]}"
        return {**self._rest(step, verb), "claim": self.claims[step[verb]]}

    def args_renew(self, step: dict[str, Any]) -> dict[str, Any]:
        return self._claimed(step, "renew")

    def args_complete(self, step: dict[str, Any]) -> dict[str, Any]:
        return self._claimed(step, "complete")

    def args_fail(self, step: dict[str, Any]) -> dict[str, Any]:
        return self._claimed(step, "fail")

    def args_checkpoint(self, step: dict[str, Any]) -> dict[str, Any]:
        args = self._claimed(step, "checkpoint")
        args["result_id"] = str(self.result_id(args.pop("result")))
        return args

    def args_depend(self, step: dict[str, Any]) -> dict[str, Any]:
        args = self._claimed(step, "depend")
        args["producer"] = str(self.ref(args["producer"]))
        return args

    def args_park(self, step: dict[str, Any]) -> dict[str, Any]:
        args = self._claimed(step, "park")
        if "wake_in_s" in args:
            wake = datetime.now(UTC) + timedelta(seconds=args.pop("wake_in_s"))
            args["wake_at"] = wake.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if "result" in args:
            args["result_id"] = str(self.result_id(args.pop("result")))
        if "producer" in args:
            args["producer"] = str(self.ref(args["producer"]))
        return args

    def args_signal(self, step: dict[str, Any]) -> dict[str, Any]:
        return {**self._rest(step, "signal"), "target": str(self.ref(step["signal"]))}

    def args_lookup(self, step: dict[str, Any]) -> dict[str, Any]:
        key, activity_type = step["lookup"]
        return {"key": business_key(key, activity_type)}

    def args_reap(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"limit": step["reap"]}

    def args_cleanup(self, step: dict[str, Any]) -> dict[str, Any]:
        return dict(step["cleanup"])

    # ------------------------------------------------------------ bulk steps

    def submit_many(self, spec: dict[str, Any]) -> None:
        driver = self.drivers[spec.get("by", "first")]
        for i in range(spec["n"]):
            reply = driver.call("submit", {"id": str(self.ref(f"{spec['prefix']}{i}")),
                                           "type": spec["type"]})
            assert "ok" in reply, f"submit: {reply}"

    def drain(self, spec: dict[str, Any]) -> None:
        """Claim from every listed driver at once until the queue is empty; each of the
        n activities must be claimed exactly once."""
        taken: dict[str, list[str]] = {name: [] for name in spec["by"]}
        failures: list[str] = []

        def claim_all(name: str) -> None:
            while True:
                reply = self.drivers[name].call("claim", {
                    "types": spec["types"], "limit": max(spec.get("limit", 1), 1),
                    "lease_ms": 60000})
                if "error" in reply:
                    failures.append(f"{name}: {reply['error']}")
                    return
                if not reply["ok"]["claims"]:
                    return
                taken[name] += [c["id"] for c in reply["ok"]["claims"]]

        threads = [threading.Thread(target=claim_all, args=(n,)) for n in spec["by"]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        seen: dict[str, int] = {}
        for ids in taken.values():
            for i in ids:
                seen[i] = seen.get(i, 0) + 1
        counts = ", ".join(f"{n}: {len(ids)}" for n, ids in taken.items())
        for i in range(spec["n"]):
            name = f"{spec['prefix']}{i}"
            times = seen.get(str(self.ref(name)), 0)
            assert times == 1, f"{name} claimed {times} times (claims per driver: {counts})"
        assert len(seen) == spec["n"], f"claimed {len(seen)} activities, want {spec['n']}"

    # ------------------------------------------------------------ fixtures

    def _set(self, name: str, values: dict[str, Any]) -> None:
        done = self.coll("activities").update_one({"_id": self.ref(name)}, {"$set": values})
        assert done.matched_count == 1, f"no activity {name}"

    def do_expire_lease(self, step: dict[str, Any]) -> None:
        self._set(step["expire_lease"], {"lease_deadline": _now() - timedelta(seconds=10)})

    def do_make_due(self, step: dict[str, Any]) -> None:
        self._set(step["make_due"], {"scheduled_at": _now()})

    def do_backdate(self, step: dict[str, Any]) -> None:
        field = step["field"]
        assert field in ("completed_at", "created_at", "scheduled_at"), field
        doc = self.coll("activities").find_one({"_id": self.ref(step["backdate"])})
        assert doc is not None and doc.get(field) is not None, f"no {field} to backdate"
        self._set(step["backdate"], {field: doc[field] - timedelta(seconds=step["seconds"])})

    def do_backdate_events(self, step: dict[str, Any]) -> None:
        age = timedelta(seconds=step["seconds"])
        events = self.coll("events")
        for event in events.find({"activity_id": self.ref(step["backdate_events"])}):
            events.update_one({"_id": event["_id"]}, {"$set": {
                "timestamp": event["timestamp"] - age,
                "ingested_at": (event.get("ingested_at") or event["timestamp"]) - age}})

    def do_sleep_ms(self, step: dict[str, Any]) -> None:
        time.sleep(step["sleep_ms"] / 1000)  # the scenario's own pause

    # ------------------------------------------------------------ expectations

    def do_row(self, step: dict[str, Any]) -> None:
        doc = self.coll("activities").find_one({"_id": self.ref(step["row"])})
        assert doc is not None, f"no activity {step['row']}"
        now = _now()
        for name, want in step["want"].items():
            self.match.check(name, want, column("runnerq_activities", name, doc), now)

    def do_result(self, step: dict[str, Any]) -> None:
        ref, want = step["result"], step["want"]
        rid = self.result_id(ref)
        checkpoint = isinstance(ref, dict)
        if checkpoint:
            row = self.coll("checkpoints").find_one({"_id": rid})
        else:
            row = own_result(self.coll("activities").find_one({"_id": rid}),
                             self.coll("results").find_one({"_id": rid}))
        if want == "absent":
            assert row is None, f"result {ref} exists: {row}"
            return
        assert row is not None, f"no result {ref}"
        for name, value in want.items():
            if name == "data_has":
                subset(value, row.get("data"))
            else:
                self.match.check(name, value, column("runnerq_results", name, row, checkpoint))

    def do_events(self, step: dict[str, Any]) -> None:
        """The activity's events as our events view shows them, each said stored,
        materialized or derived; the spec's stored events are our stored ones."""
        aid, want = self.ref(step["events"]), step["want"]
        view = list(reversed(self.views.get_activity_events(aid, limit=1000)))
        stored = {e["_id"]: e for e in self.coll("events").find({"activity_id": aid})}
        doc = self.coll("activities").find_one({"_id": aid}, {"outbox.events": 1}) or {}
        stored.update({e["_id"]: e for e in (doc.get("outbox") or {}).get("events", [])})
        shown_view, kept = [], []
        for event in view:
            kind = ("derived" if event.id not in stored else
                    "materialized" if stored[event.id].get("materialized") else "stored")
            shown_view.append(f"{event.event_type} ({kind})")
            if event.event_type not in DERIVED_TYPES or event.event_type in want:
                kept.append(event.event_type)
        assert kept == want, f"events {kept}, want {want}; our view: {shown_view}"

    def do_absent(self, step: dict[str, Any]) -> None:
        """The activity and everything it owns are gone."""
        aid = self.ref(step["absent"])
        left = {
            "activities": self.coll("activities").count_documents({"_id": aid}),
            "events": self.coll("events").count_documents({"activity_id": aid}),
            "results": self.coll("results").count_documents({"_id": aid}),
            "checkpoints": self.coll("checkpoints").count_documents(
                {"$or": [{"_id": aid}, {"owner_id": aid}]}),
            "idempotency": self.coll("idempotency").count_documents({"activity_id": aid}),
            "dependencies": self.coll("dependencies").count_documents(
                {"$or": [{"waiter_id": aid}, {"producer_id": aid}]}),
        }
        assert not any(left.values()), f"{step['absent']} left {shown(left)}"

    def check_stored_events(self) -> None:
        """Every event the scenario stored, against the events schema restated."""
        events = list(self.coll("events").find({"activity_id": {"$ne": None}}))
        for doc in self.coll("activities").find({"outbox.events": {"$exists": True}}):
            events += doc["outbox"]["events"]
        broken: list[str] = []
        for event in events:
            bad, notes = events_schema.problems(event)
            broken += bad
            self.notes.update(notes)
        assert not broken, "stored events that break the events schema:\n  " + \
            "\n  ".join(sorted(set(broken)))


def _now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)

"""Checks of the MongoDB server itself (once per `doctor` run, whatever the queues)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from runnerq_cli.backend.diagnosis.checks import CLOCK_SKEW_WARN
from runnerq_cli.backend.domain.checks import Check, CheckStatus
from runnerq_cli.backend.store.driver import Database
from runnerq_cli.config import Settings
from runnerq_cli.times import format_duration


def _server_facts(db: Database) -> dict[str, Any]:
    started = time.time()
    hello = db.admin_command("hello")
    finished = time.time()
    facts: dict[str, Any] = {"hello": hello, "rtt": finished - started,
                             "midpoint": (started + finished) / 2}
    try:
        facts["build"] = db.admin_command("buildInfo")
    except Exception:  # some hosted servers refuse it to ordinary users
        facts["build"] = {}
    return facts


def topology_of(hello: dict[str, Any]) -> str:
    if hello.get("msg") == "isdbgrid":
        return "sharded"
    if hello.get("setName"):
        return "replica set"
    return "standalone"


def check_server(db: Database, info: dict[str, Any]) -> Check:
    """Reachable, its version, and what its topology means for runnerq-mongo."""
    hello, build = info["hello"], info["build"]
    version = build.get("version") or hello.get("version") or "unknown"
    dev = "mongoeco" in str(build.get("gitVersion") or hello.get("gitVersion") or "")
    topology = topology_of(hello)
    facts: dict[str, Any] = {"version": version, "topology": topology, "dev_server": dev,
                             "round_trip_ms": round(info["rtt"] * 1000, 1)}
    notes: list[str] = []
    status, fix = CheckStatus.OK, None
    if topology == "standalone":
        facts["tail"] = "polling (change streams need a replica set)"
        facts["default_write_concern"] = "w:1 (no replication)"
    else:
        facts["tail"] = "change streams"
        try:
            rw = db.admin_command("getDefaultRWConcern")
            wc = (rw.get("defaultWriteConcern") or {}).get("w", "majority")
            facts["default_write_concern"] = f"w:{wc} ({rw.get('defaultWriteConcernSource')})"
        except Exception:
            wc = None
            facts["default_write_concern"] = "unknown (getDefaultRWConcern refused)"
        uri_w = db.client_write_concern.get("w")
        effective = uri_w if uri_w is not None else wc
        facts["effective_write_concern"] = f"w:{effective}" if effective is not None else None
        if effective not in (None, "majority"):
            status = CheckStatus.WARN
            notes.append(f"writes use w:{effective}: a failover can roll back acknowledged "
                         "claims and acknowledgements")
            fix = "use w=majority in the URI (or as the cluster's default write concern)"
    read_pref = db.read_preference
    facts["read_preference"] = read_pref
    if read_pref != "Primary" and read_pref.lower() != "primary":
        status = CheckStatus.WARN
        notes.append(f"the URI asks for read preference {read_pref}: the reaper's and the "
                     "lists' reads may be stale (claims and acknowledgements go to the primary)")
        fix = "remove readPreference from the workers' URI (they must read the primary)"
    label = "the mongoeco dev server" if dev else f"MongoDB {version}"
    message = (f"{label}, {topology}; tail uses {facts['tail'].split(' (')[0]}; "
               f"default write concern {facts['default_write_concern']}")
    if notes:
        message += "; " + "; ".join(notes)
    return Check("server", status, message, fix, facts)


def check_clock(settings: Settings, info: dict[str, Any]) -> Check:
    """This host's clock against the server's (`hello.localTime`, corrected by half the RTT)."""
    server_time = info["hello"].get("localTime")
    if not isinstance(server_time, datetime):
        return Check("clock", CheckStatus.NOT_CHECKED, "the server does not report its clock")
    if server_time.tzinfo is None:
        server_time = server_time.replace(tzinfo=UTC)
    skew = server_time.timestamp() - info["midpoint"]
    # runnerq-mongo times work by the server's clock (servertime.py), but programs on
    # this host that use its clock (0.1 workers, other clients) write lease deadlines
    # another host's reaper compares: a quarter lease of skew reaps their live work
    # early or dead work late. Logs and the times a user types are this host's too.
    fail_at = max(CLOCK_SKEW_WARN * 2, settings.lease / 4)
    facts = {"skew_seconds": round(skew, 3), "uncertainty_seconds": round(info["rtt"] / 2, 3),
             "warn_at_seconds": CLOCK_SKEW_WARN, "fail_at_seconds": fail_at,
             "lease_seconds": settings.lease}
    ahead = "ahead of" if skew < 0 else "behind"
    text = f"this host is {format_duration(abs(skew))} {ahead} the server"
    if abs(skew) >= fail_at:
        return Check("clock", CheckStatus.FAIL,
                     f"{text} (a quarter lease is {format_duration(fail_at)}): "
                     "programs on it that use this clock expire leases early or late "
                     "(runnerq-mongo uses the server's)", "synchronise clocks (NTP) on every host",
                     facts)
    if abs(skew) >= CLOCK_SKEW_WARN:
        return Check("clock", CheckStatus.WARN, text, "synchronise clocks (NTP)", facts)
    return Check("clock", CheckStatus.OK, f"{text} (within {format_duration(CLOCK_SKEW_WARN)})",
                 None, facts)


def server_checks(db: Database, settings: Settings) -> list[Check]:
    """The server: reachable, its version and topology, write concern, clock skew."""
    info = _server_facts(db)
    return [check_server(db, info), check_clock(settings, info)]

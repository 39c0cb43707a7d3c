"""The timing policy is the one source: the code uses it, and the docs state its numbers.

Each timing statement in docs/workers.md, docs/diagnose.md and docs/design.md
is found by a pattern and its number compared with `TIMING`: change a value in
backend/domain/timing.py and this test names the sentence that no longer holds.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from runnerq_cli import times
from runnerq_cli.backend.domain.timing import TIMING, TimingPolicy
from runnerq_cli.backend.views import metrics
from runnerq_cli.cli.commands.inspect import workers_cmd

DOCS = Path(__file__).resolve().parent.parent / "docs"
MINUTE = 60.0

# (doc, pattern with one number group per expected value, expected values, in seconds
# unless the pattern's unit says otherwise: `scale` converts the doc's number to seconds)
STATEMENTS = [
    ("workers.md", r"last heartbeat every (\S+) s", [TIMING.heartbeat_every], 1),
    ("workers.md", r"a TTL index removes entries silent for (\S+) minutes",
     [TIMING.registry_ttl], MINUTE),
    ("workers.md", r"outbox repair copies outboxes older than (\S+) s \(within about (\S+) s "
                   r"of a crash\)", [TIMING.repair_grace, TIMING.repaired_within], 1),
    ("workers.md", r"the reaper \(every min\(lease/4, (\S+) s\)\)", [TIMING.reaper_every_max], 1),
    ("workers.md", r"outbox repair \(every (\S+) s\)", [TIMING.repair_every], 1),
    ("workers.md", r"the retention purge \(every (\S+) min\)", [TIMING.purge_every], MINUTE),
    ("workers.md", r"each with ±(\S+) % jitter", [TIMING.chore_jitter * 100], 1),
    ("workers.md", r"a worker silent for (\S+) s no longer counts", [TIMING.fleet_stale_after], 1),
    ("workers.md", r"N capped at (\S+)\)", [TIMING.max_fleet_share], 1),
    ("workers.md", r"retries outcomes the server did not take \(for (\S+) s;",
     [TIMING.ack_retry_for], 1),
    ("diagnose.md", r"live \(heartbeat within (\S+) s\)", [TIMING.worker_stale_after], 1),
    ("diagnose.md", r"the entry expires after (\S+) minutes", [TIMING.registry_ttl], MINUTE),
    ("diagnose.md", r"more than (\S+) s past their lease deadline \(a worker's reaper runs at "
                    r"least every (\S+) s\)", [TIMING.lease_overdue, TIMING.reaper_every_max], 1),
    ("diagnose.md", r"an outbox older than (a) minute", [TIMING.outbox_overdue], MINUTE),
    ("diagnose.md", r"workers repair them every (\S+) s", [TIMING.repair_every], 1),
    ("design.md", r"TTL on `last_heartbeat`, (\S+) s", [TIMING.registry_ttl], 1),
    ("design.md", r"TTL field \((\S+) s\)", [TIMING.registry_ttl], 1),
    ("design.md", r"heartbeats every (\S+) s", [TIMING.heartbeat_every], 1),
    ("design.md", r"An entry silent for (\S+) s is shown as stale", [TIMING.worker_stale_after], 1),
    ("design.md", r"count the live entries \(heartbeat within (\S+) s\)",
     [TIMING.fleet_stale_after], 1),
    ("design.md", r"\(at most (\S+) counted\)", [TIMING.max_fleet_share], 1),
    ("design.md", r"Intervals vary by ±(\S+) %", [TIMING.chore_jitter * 100], 1),
    ("design.md", r"\| outbox drain \(this worker's buffer\) \| (\S+) s \|",
     [TIMING.outbox_drain_every], 1),
    ("design.md", r"\| heartbeat \| (\S+) s \|", [TIMING.heartbeat_every], 1),
    ("design.md", r"\| reaper \| lease / 4, between (\S+) and (\S+) s \|",
     [TIMING.reaper_every_min, TIMING.reaper_every_max], 1),
    ("design.md", r"\| outbox repair \(grace (\S+) s\) \| (\S+) s \|",
     [TIMING.repair_grace, TIMING.repair_every], 1),
    ("design.md", r"\| retention purge \| (\S+) s \|", [TIMING.purge_every], 1),
    ("design.md", r"outboxes are repaired within about (\S+) s", [TIMING.repaired_within], 1),
    ("design.md", r"older than a grace period \((\S+) s, for workers and the API alike\)",
     [TIMING.repair_grace], 1),
]


def _text(doc: str) -> str:
    return " ".join((DOCS / doc).read_text().split())  # sentences wrap over lines


def _number(word: str) -> float:
    return 1.0 if word == "a" else float(word)


@pytest.mark.parametrize(("doc", "pattern", "expected", "scale"), STATEMENTS,
                         ids=[f"{s[0]}: {s[1][:40]}" for s in STATEMENTS])
def test_the_docs_state_the_policys_numbers(doc, pattern, expected, scale):
    found = re.findall(pattern, _text(doc))
    assert found, f"{doc} no longer says /{pattern}/: update this test with the docs"
    for match in found:
        numbers = [match] if isinstance(match, str) else list(match)
        assert [_number(n) * scale for n in numbers] == [float(e) for e in expected], (
            f"{doc}: /{pattern}/ says {numbers}; backend/domain/timing.py says {expected}")


def test_the_code_reads_its_timings_from_the_policy():
    assert metrics.MetricsOptions().stale_after == TIMING.worker_stale_after
    assert metrics.StatsOptions().stale_after == TIMING.worker_stale_after
    # The `workers` command's default --stale-after is the policy's staleness.
    default = inspect.signature(workers_cmd).parameters["stale_after"].default.default
    assert times.duration(default, "--stale-after") == TIMING.worker_stale_after


def test_the_policy_holds_together():
    t = TimingPolicy()
    assert t.fleet_stale_after >= 3 * t.heartbeat_every  # one lost heartbeat is no death
    assert t.worker_stale_after >= t.fleet_stale_after
    assert t.registry_ttl > t.worker_stale_after
    assert t.outbox_overdue >= t.repaired_within  # doctor flags what repair missed
    assert t.lease_overdue >= t.reaper_every_max  # doctor flags what no reaper took
    assert t.reaper_every(60) == 15 and t.reaper_every(2) == 1 and t.reaper_every(20) == 5

"""benchmarks/bench_reads.py on the test server: the read commands' work does not grow
with the completed history kept (issue 15), counted by the script's model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# A long proof of our own logic (pyproject.toml, "proof"): the oldest-versions run
# of .ci/run leaves it out.
pytestmark = pytest.mark.proof

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_reads.py"


def test_reads_cost_the_same_with_ten_times_the_completed_history(server) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNERQ_")}
    env["RUNNERQ_BENCH_MONGO_URI"] = server.uri
    # Small sizes, a fifth of the live work: the same shape, and any read that grows with
    # the history still shows ×10 (it ran 42 s of the in-process server's CPU at 100,1000).
    res = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "40,400", "--model",
                          "--live-scale", "0.2", "--failed-share", "0",
                          # both histories past the exact count of completed (which reads
                          # up to that many keys, then estimates): the bounded regime
                          "--exact-up-to", "20"], env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "method: counting model" in res.stdout
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| (.*)$", res.stdout,
                                                         re.M)}
    for name in ("stats -o json", "stats --by type", "stats -o openmetrics (= one scrape)",
                 "queues", "list completed (first page)"):
        cells = [c.strip() for c in rows[name].split("|")]
        small, large = (int(re.match(r"([\d,]+), \d+ cmds", c).group(1).replace(",", ""))
                        for c in cells[:2])
        assert small > 0, (name, cells)
        # The same work, not x10 (the windows' edges may move by a completion or two
        # between the two runs: the clock runs while the history is written).
        assert abs(large - small) <= small * 0.03 + 2, (name, cells)

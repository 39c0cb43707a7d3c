"""Peak memory of `dlq import` against the size of the file it reads.

Writes an NDJSON export of about SIZE_MB megabytes (lines of LINE_KB kilobytes, each
with its own original id), imports it with `runnerq-mongo dlq import -q` in a child
process, and reports that process's peak RSS (getrusage of the children) against
the same import of a one-line file: the difference is what the file's size costs.

    python benchmarks/bench_import_rss.py [SIZE_MB] [LINE_KB]     (default 100 10)

Against RUNNERQ_BENCH_MONGO_URI, else a dev server in its own process (slow:
about 100 inserts a second, so the default takes minutes).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchserver import start_server


def write_export(path: Path, size_mb: float, line_kb: float) -> int:
    filler = "x" * int(line_kb * 1024)
    lines = 0
    with path.open("w", encoding="utf-8") as out:
        while lines == 0 or out.tell() < size_mb * 1024 * 1024:
            out.write(json.dumps({"type": "bench", "payload": {"blob": filler},
                                  "original_id": str(uuid.uuid4())}) + "\n")
            lines += 1
    return lines


def peak_rss_mb(uri: str, database: str, path: Path) -> tuple[float, float, str]:
    """(peak RSS in MB, seconds, the summary line) of one import in a child process."""
    env = {**os.environ, "RUNNERQ_MONGO_URI": uri, "RUNNERQ_DATABASE": database,
           "RUNNERQ_QUEUE": "bench", "RUNNERQ_CONFIG": ""}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "runnerq_cli", "dlq", "import", str(path),
                           "-q", "--create"], env=env, capture_output=True, text=True,
                          check=False)
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode != 0:
        raise SystemExit(f"import failed ({done.returncode}): {done.stderr}")
    # ru_maxrss of the children is the largest child so far: run the small one first.
    return max(peak, before) / 1024, seconds, done.stdout.strip()


def main() -> None:
    size_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 100.0
    line_kb = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    uri, server = start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            small = Path(tmp) / "small.ndjson"
            write_export(small, 0, line_kb)
            big = Path(tmp) / "big.ndjson"
            lines = write_export(big, size_mb, line_kb)
            database = f"bench_rss_{uuid.uuid4().hex[:8]}"
            base, _, _ = peak_rss_mb(uri, database, small)
            peak, seconds, summary = peak_rss_mb(uri, database, big)
            print(f"file: {big.stat().st_size / 1e6:.1f} MB, {lines} lines of {line_kb:g} KB")
            print(f"peak RSS: one-line import {base:.1f} MB, this import {peak:.1f} MB, "
                  f"growth {peak - base:.1f} MB ({seconds:.0f} s; {summary})")
    finally:
        if server is not None:
            server.kill()


if __name__ == "__main__":
    main()

"""Peak memory of `enqueue --from` against the size of the file it reads (issue 15).

Two runs, each in its own child process, each against the same command on a one-line
file (the difference is what the file's size costs):

- write: an NDJSON file of about SIZE_MB megabytes of LINE_KB-kilobyte lines, enqueued
  with `runnerq-mongo enqueue --from FILE -q` (every line read, validated and written);
- validate: about SMALL_MB megabytes of small lines (~40 bytes) whose last line is
  invalid, with `--strict` (every line read and validated in the first pass; nothing
  written, so a dev server can run it: ~800,000 lines);
- json: about JSON_MB megabytes of small lines enqueued with `-o json`, whose
  `activities` list is streamed, not kept (one record per line written);
- big lines: BIG_MB megabytes of 6.7 MB lines (a payload near its 7.5 MiB bound, a
  list of numbers: the costliest shape once decoded) enqueued at the default
  --batch-size (100) with `-q`: the byte cap per batch
  (sizes.INPUT_BATCH_BYTES, 4 MiB) makes each line a batch of its own; without it
  the ten lines were one batch, held at once (937 MB, issue 23).

    python benchmarks/bench_enqueue_rss.py [SIZE_MB] [LINE_KB] [SMALL_MB] [JSON_MB] [BIG_MB]
    (default 30 10 30 0.2 60; a run whose size is 0 is skipped)

Against RUNNERQ_BENCH_MONGO_URI, else a dev server in its own process (slow: about 100
inserts a second, so the write run takes a minute). The peak RSS of a child is read
with getrusage(RUSAGE_CHILDREN) in a wrapper process of its own, so one run's peak never
hides another's. PYTHONPATH is passed on: point it at an older checkout to compare.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchserver import bench_queue

BIG_LINE_KB = 6.7 * 1000 * 1000 / 1024  # a 6.7 MB line: a payload near its 7.5 MiB bound
WRAPPER = ("import resource, subprocess, sys\n"
           "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
           "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
           "print(peak, done.returncode)\n"
           "sys.stderr.write(done.stderr[-400:])\n")


def write_lines(path: Path, size_mb: float, line_kb: float, bad_last: bool = False,
                numbers: bool = False) -> int:
    """NDJSON of `line_kb`-KB lines (small ones if 0): a payload of one string, or with
    `numbers` a list of numbers (the costliest shape once decoded: an object each; 15
    bytes of JSON and about 16 of BSON each, so the payload stays within its bound)."""
    filler: Any = "x" * int(line_kb * 1024)
    if numbers:
        filler = list(range(10**12, 10**12 + int(line_kb * 1024 / 15)))
    lines = 0
    with path.open("w", encoding="utf-8") as out:
        while lines == 0 or out.tell() < size_mb * 1024 * 1024:
            payload = {"blob": filler} if filler else {"n": lines}
            out.write(json.dumps({"type": "bench", "payload": payload}) + "\n")
            lines += 1
        if bad_last:
            out.write("not json\n")
            lines += 1
    return lines


def peak_rss_mb(env: dict[str, str], *args: str) -> tuple[float, float, int]:
    """(peak RSS in MB, seconds, exit code) of `runnerq-mongo ARGS` in a child process.

    It runs in a temporary directory: `python -m` puts its working directory first on
    sys.path, which would hide a PYTHONPATH pointing at another checkout.
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-c", WRAPPER, sys.executable, "-m",
                               "runnerq_cli", *args], env=env, capture_output=True, text=True,
                              check=True, cwd=cwd)
    seconds = time.monotonic() - started
    peak, code = done.stdout.split()
    return int(peak) / 1024, seconds, int(code)


def growth(env: dict[str, str], tmp: Path, size_mb: float, line_kb: float, bad_last: bool,
           options: tuple[str, ...], numbers: bool = False) -> str:
    """`enqueue --from FILE OPTIONS` on a file of about `size_mb` MB against the same
    on a one-line file: the peak RSS of each and the difference, as one line."""
    one, big = tmp / "one.ndjson", tmp / "big.ndjson"
    write_lines(one, 0, line_kb, bad_last=bad_last, numbers=numbers)
    lines = write_lines(big, size_mb, line_kb, bad_last=bad_last, numbers=numbers)
    base, _, _ = peak_rss_mb(env, "enqueue", "--from", str(one), *options)
    peak, seconds, code = peak_rss_mb(env, "enqueue", "--from", str(big), *options)
    size = f"{lines} lines of {line_kb:g} KB" if line_kb else f"{lines} small lines"
    return (f"{big.stat().st_size / 1e6:.1f} MB, {size} (exit {code}, {seconds:.0f} s): "
            f"peak RSS one-line {base:.1f} MB, this {peak:.1f} MB, "
            f"growth {peak - base:.1f} MB")


def main() -> None:
    size_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    line_kb = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    small_mb = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    json_mb = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
    big_mb = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    with bench_queue("bench_enqueue") as env, tempfile.TemporaryDirectory() as tmp:
        # the dev server takes its time on big documents (90 s for a 6.7 MB list of
        # numbers), answering nothing meanwhile: no timeout may end the run
        env.update({"RUNNERQ_CONNECT_TIMEOUT": "1h", "RUNNERQ_SOCKET_TIMEOUT": "1h",
                    "RUNNERQ_SERVER_SELECTION_TIMEOUT": "1h"})
        runs = (("write", size_mb, line_kb, False, ("-q",), False),
                ("validate (--strict, last line invalid)", small_mb, 0.0, True,
                 ("--strict",), False),
                ("write with -o json", json_mb, 0.0, False, ("-o", "json"), False),
                ("big lines of numbers at the default batch size", big_mb, BIG_LINE_KB,
                 False, ("-q",), True))
        for name, mb, kb, bad_last, options, numbers in runs:
            if mb:
                print(f"{name}: "
                      f"{growth(env, Path(tmp), mb, kb, bad_last, options, numbers)}",
                      flush=True)


if __name__ == "__main__":
    main()

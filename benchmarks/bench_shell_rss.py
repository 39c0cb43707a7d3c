"""Peak memory of a worker whose shell handler prints a lot (issue 23, part 4).

Two runs, each `runnerq-mongo worker --burst` in its own child process with one
activity whose shell handler prints SIZE_MB megabytes to standard output (and as much
to standard error), against the same with a handler printing one line: the
difference is what the output costs. A shell handler's output is read with bounded
memory (runnerq_cli/worker/pipes.py): standard output whole up to 16 MiB, then only its
last 16 KiB; standard error only its last 2 KiB.

    python benchmarks/bench_shell_rss.py [SIZE_MB]      (default 400)

Against RUNNERQ_BENCH_MONGO_URI, else a dev server in its own process. The peak RSS is
read as bench_enqueue_rss.py reads it (getrusage of a wrapper's children). PYTHONPATH is
passed on: point it at an older checkout to compare.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_enqueue_rss import peak_rss_mb
from benchserver import bench_queue


def worker_peak(env: dict[str, str], size_mb: float) -> tuple[float, float, int]:
    """(peak RSS MB, seconds, exit code) of a burst worker running one activity whose
    handler prints `size_mb` MB to stdout and to stderr."""
    size = int(size_mb * 1024 * 1024)
    command = (f"sh -c 'head -c {size} /dev/zero | tr \"\\0\" x; "
               f"head -c {size} /dev/zero | tr \"\\0\" e >&2; echo done'")
    subprocess.run([sys.executable, "-m", "runnerq_cli", "enqueue", "print", "-q"], env=env,
                   check=True, capture_output=True)
    return peak_rss_mb(env, "worker", "--burst", "--exec", f"print={command}")


def main() -> None:
    size_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 400.0
    with bench_queue("bench_shell") as env:
        base, _, _ = worker_peak(env, 0)
        peak, seconds, code = worker_peak(env, size_mb)
    print(f"shell handler printing {size_mb:g} MB to stdout and to stderr (exit {code}, "
          f"{seconds:.0f} s): peak RSS one line {base:.1f} MB, this {peak:.1f} MB, "
          f"growth {peak - base:.1f} MB")


if __name__ == "__main__":
    main()

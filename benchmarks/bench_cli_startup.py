"""Startup cost of `runnerq-mongo --help` and of one TAB, and CPU of one command run.

Part 1 (wall time): `--help` and one completion TAB, next to `rq --help`.

Issue 4: completion and --help must be at least twice as fast as `rq --help`
(rq is the `bench` extra: `pip install -e '.[bench]'`). All commands run as
real processes, interleaved round by round (so drift in machine load hits
every command alike); the median of each is reported with its ratio to rq.

    python benchmarks/bench_cli_startup.py [--rounds 21] [--cpu-rounds 41]

Part 2 (issue 11, per-command CPU, for CI scripts that call the tool in loops):
user+sys CPU of one `runnerq-mongo enqueue` process against a bare Python
script that inserts the same kind of document with pymongo, both against one
server started once (RUNNERQ_BENCH_MONGO_URI, else a mongoeco dev server in a
separate process, so the server's CPU is not counted). CPU comes from
resource.getrusage(RUSAGE_CHILDREN) around each run; target: the command costs
at most 1.5x the bare script.

What "one TAB" costs: the shipped scripts are static (the command tree is
baked in), so a TAB runs a shell function and never starts Python. It is
measured as a fresh `bash` that sources completions/runnerq-mongo.bash and
completes `runnerq-mongo re<TAB>` (an upper bound: an interactive shell has
the script loaded already). `completion show bash` is the program's own
completion path (generating the script from the live tree).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchserver import start_server

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TAB = ("source {script}; COMP_WORDS=(runnerq-mongo re); COMP_CWORD=1; _runnerq_mongo; "
       "[ ${{#COMPREPLY[@]}} -gt 0 ] || exit 1")


def commands() -> dict[str, list[str]]:
    ours = str(BIN / "runnerq-mongo") if (BIN / "runnerq-mongo").exists() else None
    prog = [ours] if ours else [sys.executable, "-m", "runnerq_cli"]
    found = {
        "runnerq-mongo --help": [*prog, "--help"],
        "runnerq-mongo completion show bash": [*prog, "completion", "show", "bash"],
    }
    bash = shutil.which("bash")
    if bash:
        script = ROOT / "completions" / "runnerq-mongo.bash"
        found["one TAB (bash + static script)"] = [bash, "--norc", "--noprofile", "-c",
                                                   TAB.format(script=script)]
    rq = BIN / "rq" if (BIN / "rq").exists() else shutil.which("rq")
    if rq:
        found["rq --help"] = [str(rq), "--help"]
    return found


def run_once(argv: list[str]) -> float:
    # As installed by pip: byte-code cached (an editable checkout under
    # PYTHONDONTWRITEBYTECODE=1 would recompile every module on every run).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NO_COLOR"] = "1"
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[:300]!r}")
    return elapsed


BARE = """
import os, sys, uuid
from datetime import UTC, datetime
from pymongo import MongoClient
client = MongoClient(os.environ["RUNNERQ_MONGO_URI"])
now = datetime.now(UTC)
client[os.environ.get("RUNNERQ_DATABASE", "runnerq")]["bench_bare"].insert_one(
    {"_id": str(uuid.uuid4()), "activity_type": "bench", "payload": {"n": 1}, "priority": 2,
     "status": "pending", "created_at": now, "retry_count": 0, "max_retries": 3})
print(1)
"""


def child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """User+sys CPU seconds of one child process (rusage of reaped children, before/after)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[:300]!r}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_command_cpu(rounds: int) -> bool:
    """Part 2: CPU of `runnerq-mongo enqueue` against the bare pymongo script."""
    uri, server = start_server()
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(RUNNERQ_MONGO_URI=uri, RUNNERQ_DATABASE="runnerq_bench_cli", NO_COLOR="1")
        ours = str(BIN / "runnerq-mongo") if (BIN / "runnerq-mongo").exists() else None
        prog = [ours] if ours else [sys.executable, "-m", "runnerq_cli"]
        runs = {
            "runnerq-mongo enqueue bench -p '{\"n\": 1}' -q": [*prog, "enqueue", "bench", "-p",
                                                               '{"n": 1}', "-q"],
            "python bare_pymongo_insert.py": [sys.executable, "-c", BARE],
        }
        for argv in runs.values():  # warm caches and .pyc files
            child_cpu(argv, env)
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(rounds):
            for name, argv in runs.items():
                cpu[name].append(child_cpu(argv, env))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    where = "RUNNERQ_BENCH_MONGO_URI" if server is None else "mongoeco dev server"
    print(f"\nper-command CPU (user+sys of the child), {rounds} interleaved rounds, "
          f"server: {where}")
    medians = {name: statistics.median(values) for name, values in cpu.items()}
    for name, median in medians.items():
        print(f"  {name:44s} {median * 1000:7.1f} ms CPU "
              f"(mean {statistics.mean(cpu[name]) * 1000:.1f})")
    ours_cpu, bare_cpu = medians.values()
    ratio = ours_cpu / bare_cpu
    met = ratio <= 1.5
    print(f"target (a command costs at most 1.5x the bare script): "
          f"{'met' if met else 'NOT met'} ({ratio:.2f}x)")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="Rounds of part 1 (0 skips it).")
    parser.add_argument("--cpu-rounds", type=int, default=41,
                        help="Rounds of part 2 (0 skips it).")
    args = parser.parse_args()
    if args.rounds > 0:
        bench_startup(args.rounds)
    if args.cpu_rounds > 0:
        bench_command_cpu(args.cpu_rounds)
    return 0


def bench_startup(rounds: int) -> None:
    """Part 1: wall time of --help and one TAB, interleaved with `rq --help`."""
    cmds = commands()
    if "rq --help" not in cmds:
        print("rq is not installed: pip install -e '.[bench]'", file=sys.stderr)
    for argv in cmds.values():  # warm the file cache and .pyc files
        run_once(argv)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, argv in cmds.items():
            times[name].append(run_once(argv))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians.get("rq --help")
    print(f"python {sys.version.split()[0]}, {rounds} interleaved rounds, median wall time")
    for name, median in medians.items():
        ratio = f"{base / median:5.1f}x faster than rq --help" if base and name != "rq --help" \
            else ""
        spread = f"(min {min(times[name]) * 1000:.0f}, max {max(times[name]) * 1000:.0f})"
        print(f"  {name:36s} {median * 1000:7.1f} ms {spread:20s} {ratio}")
    targets = [n for n in ("runnerq-mongo --help", "one TAB (bash + static script)")
               if n in medians]
    if base and targets:
        worst = max(medians[n] for n in targets)
        verdict = "met" if base / worst >= 2 else "NOT met"
        print(f"target (--help and one TAB at least 2x faster than rq --help): {verdict} "
              f"(slowest of them is {base / worst:.2f}x); `completion show` is a one-off "
              "install step, shown for information")


if __name__ == "__main__":
    sys.exit(main())

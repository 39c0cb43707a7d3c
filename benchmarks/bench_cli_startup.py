"""Startup cost of `runnerq-mongo --help` and of one TAB, and CPU of one command run.

Part 1 (wall time): `--help` and one completion TAB, next to `rq --help`.

Issue 4: completion and --help must be at least twice as fast as `rq --help`
(rq is the `bench` extra: `pip install -e '.[bench]'`). All commands run as
real processes, interleaved round by round (so drift in machine load hits
every command alike); the median of each is reported with its ratio to rq.

    python benchmarks/bench_cli_startup.py [--rounds 21] [--cpu-rounds 41]

Part 2 (CPU, issues 11 and 41, for CI scripts that call the tool once per item):
user+sys CPU of one `runnerq-mongo enqueue` process against a bare Python script
that inserts the same kind of document with pymongo, both against one server
started once (RUNNERQ_BENCH_MONGO_URI, else a mongoeco dev server in a separate
process, so the server's CPU is not counted), and of `runnerq-mongo --help`
against `rq --help`. CPU comes from resource.getrusage(RUSAGE_CHILDREN) around
each run. Targets: the command costs at most 1.5x the bare script, --help at most
0.5x `rq --help`. Each round runs every contender once; the figure is the median
of the rounds' ratios, with their spread (a shared machine moves single runs by
+-30 %).

Both ways our package may be loaded are measured (`--bytecode`):
- `cached`: byte-code cached, as `pip install` leaves it (and an editable checkout
  once a run has written its __pycache__);
- `uncached`: no cached byte-code for our package, so each run compiles every module
  it imports: an editable checkout in an environment that sets
  PYTHONDONTWRITEBYTECODE=1 (many CI images and containers). Measured on a copy of
  the package without __pycache__, put first on PYTHONPATH.
The dependencies (typer, pymongo) keep their installed byte-code either way.

What "one TAB" costs: the shipped scripts are static (the command tree is
baked in), so a TAB runs a shell function and never starts Python. It is
measured as a fresh `bash` that sources completions/runnerq-mongo.bash and
completes `runnerq-mongo re<TAB>` (an upper bound: an interactive shell has
the script loaded already). `completion show bash` is the program's own
completion path (generating the script from the live tree).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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


def child_cpu(argv: list[str], env: dict[str, str], cwd: str | None = None) -> float:
    """User+sys CPU seconds of one child process (rusage of reaped children, before/after)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[:300]!r}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@contextlib.contextmanager
def loaded(bytecode: str, uri: str) -> Iterator[tuple[list[str], dict[str, str], str | None]]:
    """(our program, its environment, its working directory) for one way of loading the
    package: `cached` (as installed), or `uncached` (a copy without byte-code, compiled on
    every run, as an editable checkout under PYTHONDONTWRITEBYTECODE=1)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(RUNNERQ_MONGO_URI=uri, RUNNERQ_DATABASE="runnerq_bench_cli", NO_COLOR="1")
    ours = str(BIN / "runnerq-mongo") if (BIN / "runnerq-mongo").exists() else None
    prog = [ours] if ours else [sys.executable, "-m", "runnerq_cli"]
    if bytecode == "cached":
        yield prog, env, None
        return
    with tempfile.TemporaryDirectory(prefix="rq-bench-") as tmp:
        shutil.copytree(ROOT / "runnerq_cli", Path(tmp) / "runnerq_cli",
                        ignore=shutil.ignore_patterns("__pycache__"))
        env.update(PYTHONPATH=tmp, PYTHONDONTWRITEBYTECODE="1")
        yield prog, env, tmp  # run from the copy: `-m` puts the working directory first


def bench_command_cpu(rounds: int, bytecode: str) -> bool:
    """Part 2: CPU of `runnerq-mongo enqueue` against the bare pymongo script, and of
    `runnerq-mongo --help` against `rq --help`."""
    uri, server = start_server()
    try:
        with loaded(bytecode, uri) as (prog, env, cwd):
            runs = {
                "runnerq-mongo enqueue bench -p '{\"n\": 1}' -q": [*prog, "enqueue", "bench",
                                                                   "-p", '{"n": 1}', "-q"],
                "python bare_pymongo_insert.py": [sys.executable, "-c", BARE],
                "runnerq-mongo --help": [*prog, "--help"],
            }
            rq = BIN / "rq" if (BIN / "rq").exists() else shutil.which("rq")
            if rq:
                runs["rq --help"] = [str(rq), "--help"]
            for argv in runs.values():  # warm the file cache (and, cached, the .pyc files)
                child_cpu(argv, env, cwd)
            cpu: dict[str, list[float]] = {name: [] for name in runs}
            for index in range(rounds):
                order = list(runs.items()) if index % 2 == 0 else list(runs.items())[::-1]
                for name, argv in order:
                    cpu[name].append(child_cpu(argv, env, cwd))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    where = "RUNNERQ_BENCH_MONGO_URI" if server is None else "mongoeco dev server"
    print(f"\nper-command CPU (user+sys of the child), byte-code {bytecode}, {rounds} "
          f"interleaved rounds, server: {where}")
    for name, values in cpu.items():
        print(f"  {name:44s} {statistics.median(values) * 1000:7.1f} ms CPU "
              f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})")
    names = list(runs)
    met = _target(cpu, names[0], names[1], 1.5, "a command costs at most 1.5x the bare script")
    if "rq --help" in cpu:
        met = _target(cpu, "runnerq-mongo --help", "rq --help", 0.5,
                      "--help costs at most 0.5x rq --help") and met
    else:
        print("rq is not installed (pip install -e '.[bench]'): --help's target not measured")
    return met


def _target(cpu: dict[str, list[float]], ours: str, theirs: str, bound: float,
            words: str) -> bool:
    """Print the median of the rounds' ratios ours/theirs, their quartiles and range."""
    ratios = sorted(a / b for a, b in zip(cpu[ours], cpu[theirs], strict=True))
    median = statistics.median(ratios)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [median] * 3
    met = median <= bound
    print(f"target ({words}): {'met' if met else 'NOT met'} ({median:.2f}x, median of the "
          f"rounds' ratios; quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f}, "
          f"range {ratios[0]:.2f}-{ratios[-1]:.2f})")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="Rounds of part 1 (0 skips it).")
    parser.add_argument("--cpu-rounds", type=int, default=41,
                        help="Rounds of part 2 (0 skips it).")
    parser.add_argument("--bytecode", choices=("cached", "uncached", "both"), default="both",
                        help="Part 2 with our byte-code cached (as installed), not cached "
                             "(compiled on every run), or both (default).")
    args = parser.parse_args()
    if args.rounds > 0:
        bench_startup(args.rounds)
    if args.cpu_rounds > 0:
        for bytecode in ("cached", "uncached"):
            if args.bytecode in (bytecode, "both"):
                bench_command_cpu(args.cpu_rounds, bytecode)
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

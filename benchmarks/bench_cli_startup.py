"""Startup cost of `runnerq-mongo --help` and of one completion TAB, next to `rq --help`.

Issue 4: completion and --help must be at least twice as fast as `rq --help`
(rq is the `bench` extra: `pip install -e '.[bench]'`). All commands run as
real processes, interleaved round by round (so drift in machine load hits
every command alike); the median of each is reported with its ratio to rq.

    python benchmarks/bench_cli_startup.py [--rounds 21]

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
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    cmds = commands()
    if "rq --help" not in cmds:
        print("rq is not installed: pip install -e '.[bench]'", file=sys.stderr)
    for argv in cmds.values():  # warm the file cache and .pyc files
        run_once(argv)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.rounds):
        for name, argv in cmds.items():
            times[name].append(run_once(argv))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians.get("rq --help")
    print(f"python {sys.version.split()[0]}, {args.rounds} interleaved rounds, median wall time")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

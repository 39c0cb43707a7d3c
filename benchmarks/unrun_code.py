"""What one command compiles but never runs: the code to move out of its import path.

Where byte-code is not cached (an editable checkout under PYTHONDONTWRITEBYTECODE), a
command pays the compile time of every module it imports, whether or not it runs that
code: `bench_cli_startup.py --bytecode uncached` measures the total, this names the
parts. It runs the command once in this process, records every function of ours that
was entered, and prints, per module loaded, the compile time of the functions never
entered beside that of the whole module (hot, best of five compiles), the largest of
them, and the totals. A function run only on an error, or by some other command, is a
candidate for a module of its own, loaded where it is used (CONTRIBUTING.md, "What a
command costs to start").

    python benchmarks/unrun_code.py [--module PREFIX] [--top N] -- enqueue t -q

Run it against a server (RUNNERQ_MONGO_URI, e.g. `runnerq-mongo dev-server`): a command
that cannot connect stops early and runs less than it would.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import sys
import time
import types
from pathlib import Path

PACKAGE = "runnerq_cli"


def entered_functions(argv: list[str]) -> set[tuple[str, int]]:
    """(file, first line) of every function of ours entered while `argv` ran."""
    entered: set[tuple[str, int]] = set()

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and f"/{PACKAGE}/" in frame.f_code.co_filename:
            entered.add((frame.f_code.co_filename, frame.f_code.co_firstlineno))

    sys.setprofile(profile)
    try:
        from runnerq_cli.cli.app import main

        with contextlib.redirect_stdout(io.StringIO()):
            main(argv)
    finally:
        sys.setprofile(None)
    return entered


def compile_ms(source: str | ast.Module) -> float:
    """Milliseconds to compile `source`: the best of five (a busy machine adds, never
    subtracts)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        compile(source, "<measured>", "exec")
        best = min(best, time.perf_counter() - start)
    return best * 1000


def unrun(path: str, tree: ast.Module,
          entered: set[tuple[str, int]]) -> list[tuple[float, str]]:
    """(compile ms, dotted name) of each function in `tree` never entered; a function
    entered is looked into for methods and nested functions never entered."""
    found: list[tuple[float, str]] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                if any((path, line) in entered for line in range(first, node.lineno + 1)):
                    walk(node.body, f"{prefix}{node.name}.")
                else:
                    found.append((compile_ms(ast.Module(body=[node], type_ignores=[])),
                                  prefix + node.name))
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default=PACKAGE,
                        help="Show only the modules whose name starts with this.")
    parser.add_argument("--top", type=int, default=6,
                        help="How many of each module's never-run functions to name.")
    parser.add_argument("command", nargs="+", help="The command line, after --.")
    args = parser.parse_args()
    entered = entered_functions(args.command)
    rows = []
    total_unrun = total = 0.0
    size = 0
    loaded = sorted(name for name in sys.modules
                    if name == PACKAGE or name.startswith(f"{PACKAGE}."))
    for name in loaded:
        path = getattr(sys.modules[name], "__file__", None)
        if not path:
            continue
        source = Path(path).read_text(encoding="utf-8")
        never = unrun(path, ast.parse(source), entered)
        whole, unrun_ms = compile_ms(source), sum(ms for ms, _ in never)
        total, total_unrun, size = total + whole, total_unrun + unrun_ms, size + len(source)
        if name.startswith(args.module):
            rows.append((unrun_ms, whole, name, sorted(never, reverse=True)[:args.top]))
    for unrun_ms, whole, name, never in sorted(rows, reverse=True):
        names = ", ".join(f"{fn} {ms:.2f}" for ms, fn in never)
        print(f"{unrun_ms:5.2f} of {whole:5.2f} ms  {name}" + (f": {names}" if names else ""))
    print(f"{len(loaded)} modules of ours loaded ({size:,} bytes of source): compiling them "
          f"takes {total:.1f} ms, {total_unrun:.1f} ms of it for functions never run")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`--help` and completion must not import what they don't need (issue 4).

Behaviour, not timing (timing is benchmarks/bench_cli_startup.py): in a
fresh interpreter, after the help or completion path has run, the driver,
the backend and rich are not in sys.modules.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pymongo", "bson", "rich", "yaml", "prometheus_client", "runnerq_cli.backend")

PROBE = """
import contextlib, io, json, sys
from runnerq_cli.cli.app import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] in ("pymongo", "bson", "rich", "yaml", "prometheus_client")
               or m == "runnerq_cli.backend" or m.startswith("runnerq_cli.backend.")
               or m == "runnerq_cli.exposition")
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("args", [
    ["--help"],
    ["-h"],
    ["completion", "show", "bash"],
    ["completion", "show", "zsh"],
    ["completion", "--help"],
    ["cancel", "--help"],
    ["redrive", "--help"],
    ["doctor", "--help"],
    ["explain", "--help"],
    ["queues", "--help"],
    ["metrics", "--help"],
    ["metrics", "serve", "--help"],
    ["stats", "--help"],
])
def test_help_and_completion_import_nothing_heavy(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["heavy"] == [], f"{' '.join(args)} imported {report['heavy']}"


def test_generator_imports_nothing_heavy() -> None:
    code = ("import sys; from runnerq_cli.cli.completion_scripts import generate; "
            "generate('fish'); print(sorted(m for m in sys.modules "
            f"if m.split('.')[0] in {HEAVY[:5]!r} or m.startswith('runnerq_cli.backend')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"

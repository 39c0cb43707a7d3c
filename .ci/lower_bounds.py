"""Print pip constraints pinning every runtime dependency (and the otel extra) to its lower bound.

    python .ci/lower_bounds.py > lower.txt
    python .ci/lower_bounds.py --test-requirements > test-lowest.txt
    pip install -c lower.txt -e . -r test-lowest.txt

.ci/run uses it for the second environment (the oldest versions pyproject.toml allows),
so a range that claims more than the code supports fails CI. `--test-requirements`
prints the test extra without the packages that themselves need newer runtime
dependencies than our lower bounds (nx-27017 needs pymongo 4.18: its change-stream
test is skipped there).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# Test tools that cannot be installed next to the lowest runtime versions.
NOT_WITH_LOWEST = {"nx-27017"}
# Extras whose packages the test extra installs as well: pinned to their lower bounds too.
PINNED_EXTRAS = ("otel",)
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9._-]+)\s*(\[[^\]]*\])?\s*([^;]*)(;.*)?$")


def lower_bounds(requirements: list[str]) -> list[str]:
    pins = []
    for requirement in requirements:
        match = REQUIREMENT.match(requirement)
        if not match:
            raise SystemExit(f"cannot parse requirement {requirement!r}")
        name, _, spec, marker = match.groups()
        low = re.search(r">=\s*([^,\s]+)", spec)
        if not low:
            raise SystemExit(f"{name} has no lower bound (>=) in pyproject.toml")
        pins.append(f"{name}=={low.group(1)}{marker or ''}")
    return pins


def main() -> int:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    if sys.argv[1:] == ["--test-requirements"]:
        tests = [r for r in project["optional-dependencies"]["test"]
                 if REQUIREMENT.match(r).group(1) not in NOT_WITH_LOWEST]  # type: ignore[union-attr]
        print("\n".join(tests))
        return 0
    # The optional extras' lower bounds too (otel): the test extra installs them.
    extras = [r for name in PINNED_EXTRAS for r in project["optional-dependencies"][name]]
    print("\n".join(lower_bounds(project["dependencies"] + extras)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The repository speaks of the product: versions and dates, never the work that made it.

A reader of the changelog, the docs or a test knows versions and dates, and a citation
names a file of this repository or a public address. So no tracked file may name a
numbered work session, a work branch named after one, or a path of the machine it was
written on (its work and root directories, a shell's job directory): each means nothing,
or something else, anywhere else. (This file spells none of them out: it would find
itself.) The console's sign-in sessions are the
product's own word, and carry no number.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LEAKS = re.compile(
    r"(?i)\bs(?:essions?\s+\d+"  # a numbered work session
    r"|\d{1,2}-[a-z]+)"  # a work branch: s, its number, -, a word
    r"|(?<![\w.~-])/(?:work/|root/"  # a machine's own directories
    r"|tmp/bash)")  # a shell tool's job directories
# Where one may start: found ten times faster than LEAKS alone (3.5 MB of files).
CANDIDATES = re.compile(r"[sS](?:ession|ESSION|\d)|/(?:work|root|tmp)/")


def found_in(text: str) -> list[tuple[int, str]]:
    """The process words and machine paths in `text`: (offset, what)."""
    found = []
    for candidate in CANDIDATES.finditer(text):
        match = LEAKS.match(text, candidate.start())
        if match is not None:
            found.append((match.start(), match.group(0)))
    return found


def leaks(text: str) -> list[str]:
    return [what for _, what in found_in(text)]


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_the_check_finds_each_kind_and_spares_the_products_words() -> None:
    number, work, root, jobs = "1" + "1", "/" + "work/", "/" + "root/", "/" + "tmp/bash"
    # (built from parts, so this file holds none of what it looks for)
    found = leaks(f"## Unreleased (Session {number})\nmerged s{number}-review; "
                  f"see {work}shared/testbed.md or {root}notes, {jobs}_jobs.0/x")
    assert found == [f"Session {number}", f"s{number}-review", work, root, jobs]
    assert leaks("a console session (not the token) in the cookie; 2 sessions; "
                 "--cursor-file /tmp/cursor; ~/work/x; ./root/y; HOME=/home/u; "
                 "runnerq_cli/backend/store/connection.py; 0.2.0 (2026-12-02)") == []


def test_no_tracked_file_names_a_work_session_or_a_machine_path() -> None:
    found = []
    for path in tracked_files():
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        for offset, what in found_in(text):
            number = text.count("\n", 0, offset) + 1
            found.append(f"{path.relative_to(ROOT)}:{number}: {what!r}")
    assert not found, "name versions and dates, cite files of the repository:\n" + \
        "\n".join(found)

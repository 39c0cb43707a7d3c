"""Counts read right in the singular: `1 schedule`, not `1 schedules` (runnerq_cli/plural.py).

The class of bug: a count written next to its noun by hand (f"{n} schedules",
f"{n} line{'s' if ...}", "schedule(s)"), which reads wrong at 1 (or, written in the
singular, at every other count). Every such message goes through `counted()`; the scan
below finds one that does not, in the package's f-strings, its %-format log lines and
the console page's script, so the next one fails here instead of in a user's terminal.
Then the rule itself, and the case that was reported (`schedule apply`) at 1 and 2.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import runnerq_cli
from runnerq_cli.plural import counted, plural

PACKAGE = Path(runnerq_cli.__file__).parent
PAGE = PACKAGE / "console" / "static" / "index.html"

# Words after a value that are not counted nouns: verbs of a sentence about the value
# (`{name} is ...`), a command (`--queue {q} init-indexes`), units (`{n} s`, `{n} ms`).
NOT_NOUNS = {"is", "was", "has", "does", "applies", "holds", "registers", "as", "its",
             "this", "init-indexes", "s", "ms", "us", "ns"}
# Counted nouns that do not end in s: written in the singular after a count, they read
# wrong at every count but 1.
SINGULAR = {"activity", "schedule", "index", "query", "line", "event", "group", "partition",
            "try", "character", "byte", "id", "year", "worker", "document", "type", "fire",
            "attempt", "retry", "result", "record", "batch", "claim", "change", "row", "range"}
# Values followed by a noun that they do not count: texts (a name, a status), each why.
TEXT_VALUES = {
    "name": "an action's or a schedule's name (`cannot retry activity ...`)",
    "names": "the statuses an action applies to (`pending or failed activities`)",
    "queue": "a queue's name (`--queue Q schedule pause`)",
    "past": "a verb (`paused schedule S`)",
    "aid": "an activity id (`ID result is Err`)",
    "' or '.join(allowed)": "the statuses an action applies to",
    "doc.get('status')": "a status (`does not apply to completed activities`)",
    "status.replace('_', '-')": "a status (`no dead-letter activities`)",
    "literal(activity_id)": "an activity id in a log line",
}
WORD = re.compile(r"[A-Za-z][\w-]*(?:\((?:e?s)\))?")


def _looks_counted(word: str) -> bool:
    if word.endswith(("(s)", "(es)")):
        return True  # "schedule(s)": the hand-made plural itself
    word = word.lower()
    if word in NOT_NOUNS:
        return False
    return word in SINGULAR or (word.endswith("s") and not word.endswith(("ss", "us")))


def counted_by_hand(text_after: str) -> str | None:
    """The noun phrase a value is followed by, when it is a counted noun written by hand:
    its first word, or its second after a modifier (`stale workers`, `zone ranges`)."""
    if not text_after.startswith(" "):
        return None
    words = [w.rstrip(".,;:!?") for w in text_after.split()[:2]]
    if not words or not WORD.fullmatch(words[0]) or words[0].lower() in NOT_NOUNS:
        return None
    if _looks_counted(words[0]):
        return words[0]
    second = words[1] if len(words) > 1 and WORD.fullmatch(words[1]) else ""
    if second and second.lower() not in NOT_NOUNS and second.lower() not in SINGULAR \
            and _looks_counted(second):
        return f"{words[0]} {second}"
    return None


def _constant(node: ast.expr) -> bool:
    """An ALL_CAPS bound (`{NAME_MAX} characters`): never 1, written as it is."""
    name = node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else ""
    return bool(name) and name.isupper()


def _by_hand_plural(node: ast.expr) -> bool:
    """`'s' if n > 1 else ''`, `'activity' if n == 1 else 'activities'`: a plural made
    on the spot from a comparison with 1."""
    if not isinstance(node, ast.IfExp) or not isinstance(node.test, ast.Compare):
        return False
    compared = [node.test.left, *node.test.comparators]
    if not any(isinstance(c, ast.Constant) and c.value == 1 for c in compared):
        return False
    texts = [b.value.strip() for b in (node.body, node.orelse)
             if isinstance(b, ast.Constant) and isinstance(b.value, str)]
    if len(texts) != 2:
        return False
    if {texts[0], texts[1]} in ({"", "s"}, {"", "es"}, {"y", "ies"}, {"was", "were"}):
        return True
    one, other = texts[0].split(), texts[1].split()
    return any(plural(word) in other for word in one) or \
        any(plural(word) in one for word in other)


def _text_value(node: ast.expr) -> bool:
    """A value that is a text, not a count: listed, or some object's `.name`."""
    return ast.unparse(node) in TEXT_VALUES or (
        isinstance(node, ast.Attribute) and node.attr == "name")


def python_findings(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if _by_hand_plural(node) and isinstance(node, ast.IfExp):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        if not isinstance(node, ast.JoinedStr):
            continue
        for value, after in zip(node.values, node.values[1:], strict=False):
            if not (isinstance(value, ast.FormattedValue) and isinstance(after, ast.Constant)
                    and isinstance(after.value, str)):
                continue
            if _constant(value.value) or _text_value(value.value):
                continue
            noun = counted_by_hand(after.value)
            if noun is not None:
                found.append(f"{where}:{node.lineno}: {{{ast.unparse(value.value)}}} {noun}")
    for match in re.finditer(r"%[ds] ([a-z][\w-]*)", source):
        if _looks_counted(match.group(1)):
            line = source.count("\n", 0, match.start()) + 1
            found.append(f"{where}:{line}: {match.group(0)}")
    return found


def page_findings(script: str) -> list[str]:
    """The page's script: a number (fmtNum(x), x.length, a count) joined to a noun, or a
    ternary on `=== 1`, outside its own counted()."""
    found = []
    patterns = (r"(?:fmtNum\([^()]*\)|\.length|\b(?:count|total|n))\s*\+\s*\"\s([a-z][\w-]*)",
                r"\$\{[^}]*\}\s([a-z][\w-]*)")
    for pattern in patterns:
        for match in re.finditer(pattern, script):
            if _looks_counted(match.group(1)):
                line = script.count("\n", 0, match.start()) + 1
                found.append(f"index.html:{line}: {match.group(0)}")
    own = re.search(r"\nfunction counted\(.*?\n\}", script, re.S)  # the rule itself
    for match in re.finditer(r"===\s*1\s*\?\s*\"", script):
        if own is None or not own.start() <= match.start() < own.end():
            line = script.count("\n", 0, match.start()) + 1
            found.append(f"index.html:{line}: {match.group(0)}")
    return found


# ------------------------------------------------------------ the scan

def test_the_scan_finds_each_way_of_writing_a_count_by_hand() -> None:
    source = '''
a = f"nothing changed: {len(changes)} schedules as in {path}"
b = f"{n} line{'s' if n != 1 else ''}"
c = f"{count} {'activity' if count == 1 else 'activities'}"
d = f"{len(infos)} schedule(s) past its end"
e = f"{len(stale)} stale workers, {ranges} zone ranges"
f = f"{report.lines} line: done"
log.info("a client fell %d events behind", n)
'''
    found = python_findings(source, "x.py")
    assert sorted(f.split(": ", 1)[1] for f in found) == sorted([
        "{len(changes)} schedules", "'s' if n != 1 else ''", "{n} line",
        "'activity' if count == 1 else 'activities'", "{len(infos)} schedule(s)",
        "{len(stale)} stale workers", "{ranges} zone ranges", "{report.lines} line",
        "%d events"]), found
    clean = '''
a = f"nothing changed: {counted(len(changes), 'schedule')} as in {path}"
b = f"{name} is not callable; {queue} init-indexes; {NAME_MAX} characters; {t} s"
c = f"cannot {name} activity {aid}: {name} applies to {' or '.join(allowed)} activities"
'''
    assert python_findings(clean, "x.py") == []
    page = ('x = fmtNum(n) + " fires missed"; y = `${sm.warn ?? 0} warnings`;\n'
            'z = count + " activit" + (count === 1 ? "y" : "ies");\n'
            'ok = counted(n, "fire") + " missed"; w = fmtNum(n) + " paused";')
    assert len(page_findings(page)) == 3, page_findings(page)


def test_every_count_in_the_package_goes_through_counted() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "plural.py":
            continue
        found += python_findings(path.read_text(), str(path.relative_to(PACKAGE)))
    found += page_findings(PAGE.read_text())
    assert not found, "write these with runnerq_cli.plural.counted (the page: counted()):\n" \
        + "\n".join(found)


# ------------------------------------------------------------ the rule

@pytest.mark.parametrize(("count", "noun", "said"), [
    (1, "schedule", "1 schedule"), (2, "schedule", "2 schedules"),
    (0, "activity", "0 activities"), (1, "activity", "1 activity"),
    (3, "index", "3 indexes"), (2, "query", "2 queries"), (2, "try", "2 tries"),
    (2, "key", "2 keys"), (2, "dead-lettered activity", "2 dead-lettered activities"),
    (2, "zone range", "2 zone ranges"), (1.0, "year", "1.0 year"), (1.5, "year", "1.5 years"),
])
def test_counted_says_the_noun_in_the_number_of_the_count(count: float, noun: str,
                                                          said: str) -> None:
    assert counted(count, noun) == said


def test_a_shown_number_and_an_irregular_plural() -> None:
    assert counted(1204, "line", number="1,204") == "1,204 lines"
    assert counted(1, "was", number="one") == "one was"
    assert counted(2, "was") == "2 were"
    assert counted(2, "child", "children") == "2 children"
    assert plural("status") == "statuses"


# ------------------------------------------------------------ the case reported

@pytest.mark.parametrize("count", [1, 2])
def test_schedule_apply_unchanged_counts_its_schedules(run_cli: object, tmp_path: Path,
                                                       count: int) -> None:
    lines = [f"  - name: job{n}\n    type: job\n    every: 1h\n" for n in range(count)]
    spec = tmp_path / "schedules.yaml"
    spec.write_text("schedules:\n" + "".join(lines))
    assert run_cli("schedule", "apply", str(spec)).code == 0  # type: ignore[operator]
    again = run_cli("schedule", "apply", str(spec))  # type: ignore[operator]
    assert again.code == 0, again.stderr
    noun = "schedule" if count == 1 else "schedules"
    assert f"nothing changed: {count} {noun} as in " in again.stdout, again.stdout

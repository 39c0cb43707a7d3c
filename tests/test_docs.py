"""The docs' command lines exist: every `runnerq-mongo ...` line in the code blocks of
README.md, CONTRIBUTING.md, docs/*.md and benchmarks/README.md, and every "Examples:" line
of the commands' --help, names a real command path and only options that command has.

Lines are read as a shell would cut them (comments, pipes, `;`, `&&`, `$(...)`), and
synopsis notation is understood: `[--opt VALUE]`, `a|b|c`, `ID...`. Arguments are not
checked (placeholders are allowed there); options and subcommand names are.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from runnerq_cli.cli.app import app
from runnerq_cli.cli.examples import EXAMPLES
from runnerq_cli.cli.typer_compat import context_class

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
# Lines that cannot be parsed as a command on purpose, with the reason. Keep it small.
ALLOW: dict[str, str] = {}

PROGRAM = re.compile(r"(?:^|(?<=[\s($`|;&]))runnerq-mongo(?=\s|$)")
CUT = re.compile(r"\s(?:#|\||;|&&|&|\|\||>|<|2>)(?:\s|$)|\)")


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines inside fenced or indented code blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    previous_blank = True
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or (line.startswith("    ") and previous_blank) or (
                line.startswith("    ") and out and out[-1][0] == number - 1):
            out.append((number, line))
        previous_blank = not line.strip()
    return out


def command_lines(path: Path) -> list[tuple[str, str]]:
    """(where, the command line from `runnerq-mongo` on) in the file's code blocks."""
    found: list[tuple[str, str]] = []
    lines = code_lines(path)
    index = 0
    while index < len(lines):
        number, text = lines[index]
        # Continuation lines (`\` at the end) belong to the command.
        while text.rstrip().endswith("\\") and index + 1 < len(lines):
            index += 1
            text = text.rstrip()[:-1] + " " + lines[index][1].strip()
        for match in PROGRAM.finditer(text):
            found.append((f"{path.relative_to(ROOT)}:{number}", text[match.start():]))
        index += 1
    return found


def _tokens(line: str) -> list[str]:
    rest = line[len("runnerq-mongo"):]
    # Quoted text first, so a `|` or `#` inside quotes does not cut the line.
    quoted = re.sub(r"'[^']*'|\"(?:\\.|[^\"\\])*\"", lambda m: "Q" * len(m.group()), rest)
    cut = CUT.search(quoted)
    if cut:
        rest = rest[:cut.start()]
    tokens = shlex.split(rest)
    cleaned = []
    for token in tokens:
        token = token.removesuffix("...").strip("[]{}`").removesuffix("...")
        if token:
            cleaned.append(token)
    return cleaned


def _option(command: Any, ctx: Any, name: str) -> Any:
    for param in command.get_params(ctx):
        if param.param_type_name == "option" and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def check(line: str) -> str | None:
    """None when the line parses, else what is wrong."""
    context = context_class()
    command = typer.main.get_command(app)
    ctx = context(command, info_name="runnerq-mongo",
                  **(getattr(command, "context_settings", None) or {}))
    path = ["runnerq-mongo"]
    tokens = _tokens(line)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("-") and token != "-":
            for alternative in token.split("|"):  # `--at TIME | --delay 5m`
                name = alternative.split("=", 1)[0]
                if not name.startswith("-"):
                    continue
                param = _option(command, ctx, name)
                if param is None:
                    return f"{' '.join(path)}: no option {name}"
                takes_value = not param.is_flag and not getattr(param, "count", False)
                if takes_value and "=" not in alternative and alternative == token:
                    i += 1  # its value
        elif hasattr(command, "list_commands"):
            names = [n.strip() for n in token.split("|")]
            sub = command.get_command(ctx, names[0])
            if sub is None:
                return f"{' '.join(path)}: no command {names[0]!r}"
            path.append(names[0])
            command = sub
            ctx = context(sub, info_name=names[0], parent=ctx,
                          **(getattr(sub, "context_settings", None) or {}))
        # else: an argument of a leaf command (placeholders allowed)
        i += 1
    if hasattr(command, "list_commands") and len(path) > 1:
        return f"{' '.join(path)}: a group, not a command"
    return None


def all_doc_lines() -> list[tuple[str, str]]:
    return [item for path in DOCS for item in command_lines(path)]


def test_the_docs_have_command_lines_to_check() -> None:
    lines = all_doc_lines()
    assert len(lines) > 60
    files = {where.split(":")[0] for where, _ in lines}
    assert {"README.md", "docs/cli.md", "docs/workers.md"} <= files


@pytest.mark.parametrize("where,line", all_doc_lines(), ids=lambda v: str(v)[:60])
def test_every_documented_command_line_parses(where: str, line: str) -> None:
    if line in ALLOW:
        pytest.skip(ALLOW[line])
    problem = check(line)
    assert problem is None, f"{where}: {line!r}: {problem}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_help_example_parses_and_shows(name: str, run_cli) -> None:
    for example in EXAMPLES[name]:
        line = example[example.index("runnerq-mongo"):]
        problem = check(line)
        assert problem is None, f"examples[{name!r}]: {example!r}: {problem}"
        assert f" {name}" in line, example  # an example of this very command


def test_every_command_help_ends_with_examples(run_cli) -> None:
    """`--help` of each command ends with one or two examples (issue 11)."""
    context = context_class()
    root = typer.main.get_command(app)
    leaves: list[list[str]] = []

    def walk(command: Any, ctx: Any, path: list[str]) -> None:
        if not hasattr(command, "list_commands"):
            leaves.append(path)
            return
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                walk(sub, context(sub, info_name=name, parent=ctx), [*path, name])

    walk(root, context(root, info_name="runnerq-mongo"), [])
    assert len(leaves) > 15
    for path in leaves:
        out = run_cli(*path, "--help").stdout
        tail = out.rstrip().split("Examples:")
        assert len(tail) == 2, f"{' '.join(path)} --help has no Examples: section"
        examples = [line.strip() for line in tail[1].splitlines() if line.strip()]
        assert 1 <= len(examples) <= 2, (path, examples)
        assert all("runnerq-mongo" in e and " ".join(path) in e for e in examples), examples


def test_the_checker_can_fail() -> None:
    assert check("runnerq-mongo enqueue t --no-such-flag") is not None
    assert check("runnerq-mongo no-such-command") is not None
    assert check("runnerq-mongo tail") is not None  # a group
    assert check("runnerq-mongo --queue q list pending --limit 5 -o json") is None
    assert check("runnerq-mongo list pending|failed [--type T] [--limit 50]") is None


def test_relative_links_resolve() -> None:
    missing = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            resolved = (path.parent / target).resolve()
            if not resolved.exists():
                missing.append(f"{path.relative_to(ROOT)} -> {target}")
    assert missing == []

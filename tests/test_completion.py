"""Shell completion: shipped scripts are current, cover the live tree, and complete in real shells.

If `test_shipped_scripts_are_current` fails, regenerate with
    python -m runnerq_cli.cli.completion_scripts --write
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from pathlib import Path

import pytest
import typer

from runnerq_cli.cli.app import app, main
from runnerq_cli.cli.commands.completion import Shell, install_path
from runnerq_cli.cli.completion_scripts import FILE_NAMES, REPO_COMPLETIONS, SHELLS, generate
from runnerq_cli.cli.exits import ExitCode
from runnerq_cli.cli.typer_compat import context_class

Context = context_class()
REGENERATE = "python -m runnerq_cli.cli.completion_scripts --write"


def live_tree() -> list[tuple[list[str], list[str]]]:
    """(command path, option names) of every visible command, walked independently of the
    generator, straight from typer's click tree."""
    root = typer.main.get_command(app)
    out = []

    def walk(command, ctx, path):
        names = [n for p in command.get_params(ctx) if p.param_type_name == "option"
                 and not p.hidden for n in [*p.opts, *p.secondary_opts]]
        out.append((path, names))
        for name in getattr(command, "list_commands", lambda c: [])(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                walk(sub, Context(sub, info_name=name, parent=ctx), [*path, name])

    walk(root, Context(root, info_name="runnerq-mongo", **(root.context_settings or {})), [])
    return out


@pytest.mark.parametrize("shell", SHELLS)
def test_shipped_scripts_are_current(shell: str) -> None:
    shipped = REPO_COMPLETIONS / FILE_NAMES[shell]
    assert shipped.exists(), f"{shipped} is missing: run {REGENERATE}"
    assert shipped.read_text() == generate(shell), f"{shipped} is out of date: run {REGENERATE}"


@pytest.mark.parametrize("shell", SHELLS)
def test_every_command_and_option_appears(shell: str) -> None:
    text = generate(shell)
    tree = live_tree()
    assert len(tree) > 10
    for path, options in tree:
        if path:
            assert path[-1] in text, f"{shell}: command {' '.join(path)} missing"
            # The command path itself is a key of the script's tables.
            assert " ".join(path) in text, f"{shell}: path {' '.join(path)} missing"
        for option in options:
            token = option
            if shell == "fish":  # fish spells them -l NAME / -s X
                token = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
            assert token in text, f"{shell}: option {option} of {' '.join(path)!r} missing"
    for needle in ("text json jsonl", "bash zsh fish"):  # choice values
        assert needle in text


# --------------------------------------------------------- behaviour in shells

BASH_TAB = """
source {script}
read -ra COMP_WORDS <<< "$1"
[[ "$1" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
_runnerq_mongo
printf '%s\\n' "${{COMPREPLY[@]}}"
"""


def bash_tab(line: str) -> list[str]:
    script = REPO_COMPLETIONS / FILE_NAMES["bash"]
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c",
                           BASH_TAB.format(script=script), "tab", line],
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


@pytest.mark.skipif(not shutil.which("bash"), reason="bash not installed")
def test_bash_completes_commands_options_and_choices() -> None:
    assert "redrive" in bash_tab("runnerq-mongo ")
    assert sorted(bash_tab("runnerq-mongo re")) == sorted(
        w for w in bash_tab("runnerq-mongo ") if w.startswith("re"))
    # Global options with values are skipped on the way to the subcommand.
    assert "retry" in bash_tab("runnerq-mongo --queue q re")
    assert bash_tab("runnerq-mongo completion ") == ["show", "install"]
    assert bash_tab("runnerq-mongo completion show ") == ["bash", "zsh", "fish"]
    assert {"--dry-run", "--yes", "--type"} <= set(bash_tab("runnerq-mongo redrive --"))
    assert bash_tab("runnerq-mongo cancel -o j") == ["json", "jsonl"]
    assert bash_tab("runnerq-mongo cancel --output = ") == ["text", "json", "jsonl"]


@pytest.mark.skipif(not shutil.which("bash"), reason="bash not installed")
def test_bash_completes_the_values_of_string_options() -> None:
    """Options that parse text themselves still offer their values (issue 11)."""
    assert bash_tab("runnerq-mongo list ") == [
        "pending", "scheduled", "processing", "running", "waiting", "completed", "failed",
        "dead-letter", "cancelled"]
    assert bash_tab("runnerq-mongo list d") == ["dead-letter"]
    assert bash_tab("runnerq-mongo enqueue t --priority ") == ["low", "normal", "high",
                                                               "critical"]
    assert bash_tab("runnerq-mongo enqueue t --on-duplicate no") == ["no-reuse"]
    assert bash_tab("runnerq-mongo worker --log-format ") == ["auto", "rich", "plain", "json"]
    assert bash_tab("runnerq-mongo worker --log-level w") == ["warning"]
    assert bash_tab("runnerq-mongo tail events --mode ") == ["auto", "change-stream", "poll"]
    assert bash_tab("runnerq-mongo stats --by ") == ["type", "error"]
    assert bash_tab("runnerq-mongo set-priority some-id ") == ["low", "normal", "high",
                                                              "critical"]


def test_completed_values_are_the_backends() -> None:
    """The light completion lists (cli/choices.py) agree with what the backend accepts."""
    from runnerq_cli.backend.domain.models import OnDuplicate, Priority, Status
    from runnerq_cli.backend.views.events import MODES
    from runnerq_cli.cli import choices
    from runnerq_cli.config import load_settings

    assert {Status.parse(s) for s in choices.STATUSES} == set(Status)
    assert [Priority.parse(p) for p in choices.PRIORITIES] == sorted(Priority)
    assert {OnDuplicate.parse(v) for v in choices.ON_DUPLICATE} == set(OnDuplicate)
    assert choices.TAIL_MODES == MODES
    for fmt in choices.LOG_FORMATS:
        for level in choices.LOG_LEVELS:
            settings = load_settings(None, overrides={"worker.log_format": fmt,
                                                      "worker.log_level": level},
                                     environ={"RUNNERQ_CONFIG": ""})
            assert (settings.worker.log_format, settings.worker.log_level) == (fmt, level)


@pytest.mark.skipif(not shutil.which("fish"), reason="fish not installed")
def test_fish_completes() -> None:
    script = REPO_COMPLETIONS / FILE_NAMES["fish"]

    def tab(line: str) -> list[str]:
        proc = subprocess.run(["fish", "--no-config", "-c",
                               f"source {script}; complete -C '{line}'"],
                              capture_output=True, text=True, timeout=20)
        assert proc.returncode == 0, proc.stderr
        return [row.split("\t")[0] for row in proc.stdout.splitlines()]

    assert "redrive" in tab("runnerq-mongo ")
    assert set(tab("runnerq-mongo --queue q re")) >= {"retry", "redrive", "reschedule"}
    assert sorted(tab("runnerq-mongo completion show ")) == ["bash", "fish", "zsh"]
    assert "--dry-run" in tab("runnerq-mongo redrive --")
    assert sorted(tab("runnerq-mongo cancel -o ")) == ["json", "jsonl", "text"]


ZSH_TAB = """
_describe() {{
    local n=${{@[-1]}} i; for i in "${{(@P)n}}"; do print -r -- "${{i%%:*}}"; done
}}
compadd() {{ [[ $1 == -a ]] && print -l -- "${{(@P)2}}"; }}
_files() {{ print -- "<files>"; }}
compset() {{ :; }}
compdef() {{ :; }}
source {script}
words=(${{=1}})
[[ $1 == *" " ]] && words+=("")
CURRENT=${{#words}}
_runnerq_mongo
"""


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh not installed")
def test_zsh_logic_with_stubbed_compsys() -> None:
    """The zsh function's path walk and tables (compsys helpers stubbed to print)."""
    script = REPO_COMPLETIONS / FILE_NAMES["zsh"]

    def tab(line: str) -> list[str]:
        proc = subprocess.run(["zsh", "-f", "-c", ZSH_TAB.format(script=script), "tab", line],
                              capture_output=True, text=True, timeout=20)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert "redrive" in tab("runnerq-mongo ")
    assert tab("runnerq-mongo --queue q completion ") == ["show", "install"]
    assert tab("runnerq-mongo completion show ") == ["bash", "zsh", "fish"]
    assert tab("runnerq-mongo redrive -o ") == ["text", "json", "jsonl"]
    assert tab("runnerq-mongo --config ") == ["<files>"]
    assert "--dry-run" in tab("runnerq-mongo redrive --")
    zsh = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True)
    assert zsh.returncode == 0, zsh.stderr


# ------------------------------------------------------------------- the CLI


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_show_prints_the_script(shell: str) -> None:
    code, out, _ = run("completion", "show", shell)
    assert code == 0
    assert out == generate(shell)


def test_completion_show_unknown_shell() -> None:
    code, _, err = run("completion", "show", "tcsh")
    assert code == ExitCode.USAGE
    assert "error:" in err


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_install_is_idempotent(shell: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "ZDOTDIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", f"/usr/bin/{shell}")
    expected = {"bash": ".local/share/bash-completion/completions/runnerq-mongo",
                "zsh": ".zfunc/_runnerq-mongo",
                "fish": ".config/fish/completions/runnerq-mongo.fish"}[shell]
    assert install_path(Shell(shell)) == tmp_path / expected
    code, out, _ = run("completion", "install")  # shell from $SHELL
    assert code == 0
    target = tmp_path / expected
    assert f"wrote {target}" in out
    assert target.read_text() == generate(shell)
    code, out, _ = run("completion", "install", shell)
    assert code == 0
    assert f"up to date: {target}" in out


def test_completion_install_unknown_shell(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", "/bin/tcsh")
    code, _, err = run("completion", "install")
    assert code == ExitCode.USAGE
    assert "bash, zsh or fish" in err
    assert not any(tmp_path.iterdir())


def test_check_mode_reports_stale(tmp_path: Path) -> None:
    from runnerq_cli.cli.completion_scripts import main as generator_main

    assert generator_main(["--write", str(tmp_path)]) == 0
    assert generator_main(["--check", str(tmp_path)]) == 0
    (tmp_path / FILE_NAMES["fish"]).write_text("# old\n")
    assert generator_main(["--check", str(tmp_path)]) == 1

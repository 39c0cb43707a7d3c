"""`runnerq-mongo completion show|install`: print or install the shell completion scripts.

The scripts are static (generated from the live command tree by
`runnerq_cli.cli.completion_scripts`), so TAB never starts the program. They
are generated here from the installed program, so what `show` prints and
`install` writes always matches the commands this version has.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

import typer

from runnerq_cli.cli.examples import examples
from runnerq_cli.errors import InvalidArgument


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


def install_path(shell: Shell, environ: dict[str, str] | None = None) -> Path:
    """The conventional per-user place each shell loads completions from by itself.

    bash: bash-completion's user directory (loaded on first TAB);
    zsh: ~/.zfunc/_runnerq-mongo (needs `fpath+=~/.zfunc` before `compinit`);
    fish: ~/.config/fish/completions (autoloaded).
    """
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    if shell is Shell.BASH:
        data = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
        return data / "bash-completion" / "completions" / "runnerq-mongo"
    if shell is Shell.ZSH:
        return Path(env.get("ZDOTDIR") or home) / ".zfunc" / "_runnerq-mongo"
    config = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return config / "fish" / "completions" / "runnerq-mongo.fish"


NEXT_STEP = {
    Shell.BASH: "open a new shell (needs the bash-completion package)",
    Shell.ZSH: "add `fpath+={dir}` before `compinit` in your .zshrc, then open a new shell",
    Shell.FISH: "open a new shell",
}


def detect_shell(environ: dict[str, str] | None = None) -> Shell:
    """The user's shell from $SHELL; InvalidArgument when it is not one we support."""
    env = os.environ if environ is None else environ
    name = Path(env.get("SHELL", "")).name
    try:
        return Shell(name)
    except ValueError:
        raise InvalidArgument(
            f"cannot tell the shell from SHELL={env.get('SHELL', '')!r}: "
            "name it (bash, zsh or fish)") from None


def install(shell: Shell, environ: dict[str, str] | None = None) -> tuple[Path, bool]:
    """Write the script for `shell`; (path, changed). Idempotent: unchanged files stay."""
    from runnerq_cli.cli.completion_scripts import generate

    path = install_path(shell, environ)
    text = generate(shell.value)
    if path.exists() and path.read_text() == text:
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path, True


def register(app: typer.Typer) -> None:
    """Add `completion show` and `completion install`."""
    group = typer.Typer(help="Shell completion scripts (bash, zsh, fish).",
                        no_args_is_help=True)

    @group.command("show", epilog=examples("completion show"))
    def show(shell: Shell = typer.Argument(..., help="bash, zsh or fish.")) -> None:
        """Print the completion script (e.g. `source <(runnerq-mongo completion show bash)`)."""
        from runnerq_cli.cli.completion_scripts import generate

        typer.echo(generate(shell.value), nl=False)

    @group.command("install", epilog=examples("completion install"))
    def install_cmd(
        shell: Shell | None = typer.Argument(None, help="bash, zsh or fish (default: $SHELL)."),
    ) -> None:
        """Install the script where the shell finds it by itself (per user; idempotent)."""
        chosen = shell or detect_shell()
        path, changed = install(chosen)
        verb = "wrote" if changed else "up to date:"
        typer.echo(f"{verb} {path}")
        typer.echo(f"{chosen.value}: {NEXT_STEP[chosen].format(dir=path.parent)}")

    app.add_typer(group, name="completion")

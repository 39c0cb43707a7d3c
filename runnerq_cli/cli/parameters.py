"""How the command line's parameters read and show themselves: in words, on every typer.

Four things typer does its own way, set right once per built command:
- numbers are ASCII digits only (Python's int() reads `٤` as 4, which no user types
  on purpose);
- every value has a metavar in words (`N`, `TEXT`, `ID`), never how Python typed it
  (`<int range>`, `<str>`, `<list[str]>`); choices keep their list;
- no number range in help (`[1<=x<=10000]`): a bound that matters is said in words
  in the option's help text;
- an argument is shown by that word in `--help` and in the usage line (`ID`,
  `[TYPE]`, `[ID...]`): typer 0.29 writes `ID <str>` and `{ID}` there, the lowest
  typer already writes the word.

Only public surfaces are used here (typer_compat holds the one private hook, for the
range): the parameters' `type` and `metavar` attributes, and
a command class (`WordsCommand`, given to typer as each command's `cls`, as
`@app.command(cls=...)` would) whose help and usage read those metavars.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand


def plain_words(command: Any) -> Any:
    """`command` and its subcommands, each parameter walked once: ASCII-only numbers and
    metavars in words (module docstring). Returns `command`."""
    from runnerq_cli.cli.typer_compat import ascii_number_type, hide_number_range

    for param in getattr(command, "params", ()):
        _word_metavar(param)
        hide_number_range(param)
        # On typers whose parameters convert through a click type (the lowest supported)
        # an int or float option's type is wrapped to refuse other digits first; typer
        # 0.29's fast coercion does the same (typer_compat).
        wrapped = ascii_number_type(getattr(param, "type", None))
        if wrapped is not None:
            param.type = wrapped
    for sub in (getattr(command, "commands", None) or {}).values():
        plain_words(sub)
    return command


def _word_metavar(param: Any) -> None:
    """Give a parameter without a metavar one in words: an argument its name in capitals,
    an option `N`, `NUMBER` or `TEXT` (a choice keeps its list; a flag has no value)."""
    if param.metavar is not None or getattr(param, "is_flag", False):
        return
    argument = getattr(param, "param_type_name", "") == "argument"
    label = _type_label(param)
    if argument:
        param.metavar = str(param.name or "value").upper()
        return
    if label is None:  # a choice: its values are the words
        return
    many = getattr(param, "multiple", False) or getattr(param, "nargs", 1) != 1
    word = "N" if "int" in label else "NUMBER" if "float" in label else "TEXT"
    param.metavar = word + ("..." if many and "list" not in label else "")


def _type_label(param: Any) -> str | None:
    """A parameter's type in lower-case words (`int range`, `str`, `list[str]`), or None
    for a choice. Read as the installed typer describes it (`type_descriptor` from 0.26,
    a click type before)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:
        if desc.is_choice:
            return None
        name = getattr(desc.annotation, "__name__", str(desc.annotation))
        if desc.is_ranged:
            name = str(desc.ranged_type_name)
        return f"list[{name}]" if desc.is_list else name
    click_type = getattr(param, "type", None)
    if click_type is None or type(click_type).__name__ == "Choice":
        return None
    return str(getattr(click_type, "name", "text")).lower().replace("integer", "int")


def argument_label(param: Any) -> str:
    """An argument as help and usage show it: its metavar, in brackets when it may be
    left out, `...` when it takes several (`ID`, `[TYPE]`, `[ID...]`)."""
    label = str(param.metavar or str(param.name or "value").upper())
    if getattr(param, "nargs", 1) != 1 and "..." not in label:
        label += "..."
    if not param.required and not label.startswith("["):
        label = f"[{label}]"
    return label


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


class WordsCommand(TyperCommand):
    """A typer command whose help and usage show each argument by its word
    (argument_label); options as typer shows them (their metavars are words already)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if _is_argument(param):
                pieces.append(argument_label(param))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        from gettext import gettext

        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if _is_argument(param):
                arguments.append((argument_label(param), record[1]))
            elif getattr(param, "param_type_name", "") == "option":
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(gettext(title)):
                    formatter.write_dl(rows)


def use_words_commands(app: Any) -> None:
    """Make every command registered on `app` (and on its sub-apps) a WordsCommand, as
    `cls=WordsCommand` at each `@app.command` would; a command's own class is kept (typer
    0.29 records the default, TyperCommand; older typers None)."""
    for info in getattr(app, "registered_commands", ()):
        if info.cls in (None, TyperCommand):
            info.cls = WordsCommand
    for group in getattr(app, "registered_groups", ()):
        if group.typer_instance is not None:
            use_words_commands(group.typer_instance)

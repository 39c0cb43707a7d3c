"""The one place that touches typer's private modules, with fallbacks for older typers.

The fast coercion (install_fast_coercion) replaces a private method of typer 0.29; it
is installed only on the typers CI tests (TESTED_TYPER, and pyproject.toml's upper
bound), so a new typer is never patched blind: it runs its own, slower coercion.

typer 0.26 vendored click as `typer._click` (before, typer used the `click`
package); 0.29 added `typer._param_types` and coerces every parameter through a
pydantic `TypeAdapter`, which imports pydantic (~0.1 s of CPU) on every command
run. Everything the CLI needs from those internals is reached through here, so a
typer release that moves them breaks one module, and the lowest supported typer
(pyproject.toml; CI runs the suite against it) keeps working.
"""

from __future__ import annotations

import importlib
from enum import Enum
from types import ModuleType
from typing import Any


def _click_module(name: str) -> ModuleType:
    """`typer._click.<name>` (typer >= 0.26) or `click.<name>` (older typers)."""
    try:
        return importlib.import_module(f"typer._click.{name}")
    except ImportError:
        return importlib.import_module(f"click.{name}")


def click_exceptions() -> ModuleType:
    """The module defining UsageError, ClickException, NoArgsIsHelpError..."""
    return _click_module("exceptions")


def no_args_is_help_error() -> type[BaseException]:
    """click >= 8.2 raises NoArgsIsHelpError for a bare group; older clicks exit(0) themselves."""
    return getattr(click_exceptions(), "NoArgsIsHelpError", _NeverRaised)


class _NeverRaised(Exception):
    """Stands in for an exception class this click version does not have."""


def context_class() -> type:
    """click's `Context` (to build contexts when walking the command tree)."""
    context: type = _click_module("core").Context
    return context


def make_default_short_help(text: str, limit: int) -> str:
    short: str = _click_module("utils").make_default_short_help(text, limit)
    return short


def choice_as_str(choice: Any) -> str:
    """How typer shows a choice (an Enum member by its value)."""
    return str(choice.value) if isinstance(choice, Enum) else str(choice)


def param_choices(param: Any, ctx: Any = None) -> list[str] | None:
    """The values TAB offers: an Enum/Literal/click.Choice's choices, else what the
    parameter's own completion callback (`autocompletion=`) offers for "", or None."""
    desc = getattr(param, "type_descriptor", None)  # typer >= 0.29
    if desc is not None and desc.choices is not None:
        return [choice_as_str(c) for c in desc.choices]
    choices = getattr(getattr(param, "type", None), "choices", None)  # older: click.Choice
    if choices:
        return [choice_as_str(c) for c in choices]
    if ctx is not None:
        # click's public completion API; only plain values (not file/dir directives).
        items = [item for item in param.shell_complete(ctx, "")
                 if getattr(item, "type", "plain") == "plain"]
        if items:
            return [str(item.value) for item in items]
    return None


def param_is_path(param: Any) -> tuple[bool, bool]:
    """(is a file or path parameter, accepts only directories)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:
        if desc.is_file:
            return True, False
        if desc.is_path:
            info = desc.parameter_info
            return True, bool(getattr(info, "dir_okay", True)
                              and not getattr(info, "file_okay", True))
        return False, False
    kind = type(getattr(param, "type", None)).__name__
    if kind == "File":
        return True, False
    if kind == "Path":
        ptype = param.type
        return True, bool(ptype.dir_okay and not ptype.file_okay)
    return False, False


# ------------------------------------------------------------ fast coercion

_INT_ERROR = "Input should be a valid integer, unable to parse string as an integer"
_FLOAT_ERROR = "Input should be a valid number, unable to parse string as a number"


def _fast_coercer(annotation: Any, info: Any) -> Any:
    """A pydantic-free coercion for the plain types our commands use, or None.

    Same results and the same messages as typer's pydantic adapters for str,
    int and float (with min/max), bool and Enum choices, and lists of those.
    """
    if getattr(info, "parser", None) is not None or getattr(info, "clamp", False):
        return None
    if getattr(info, "click_type", None) is not None:
        return None
    origin = getattr(annotation, "__origin__", None)
    if origin is list:
        (item_type,) = getattr(annotation, "__args__", (None,))
        item = _fast_coercer(item_type, info)
        if item is None:
            return None
        return lambda value, ctx: [item(v, ctx) for v in
                                   (value if isinstance(value, list | tuple) else [value])]
    if annotation is str:
        return lambda value, ctx: value if isinstance(value, str) else _as_str(value)
    if annotation is bool:
        return _as_bool
    if annotation in (int, float):
        return _number(annotation, info.min, info.max)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        from typer._param_types import coerce_cli_choice

        choices = tuple(annotation)
        sensitive = info.case_sensitive

        def choice(value: Any, ctx: Any) -> Any:
            try:
                return coerce_cli_choice(value, choices=choices, case_sensitive=sensitive,
                                         ctx=ctx)
            except ValueError as exc:
                raise _Invalid(f"Value error, {exc}") from None
        return choice
    return None


class _Invalid(ValueError):
    """A value the fast coercion rejects (becomes click's BadParameter)."""


def _as_str(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None:
        raise _Invalid("None is not a valid string")
    return str(value)


def _as_bool(value: Any, ctx: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("", "0", "false", "f", "no", "n", "off"):
        return False
    if text in ("1", "true", "t", "yes", "y", "on"):
        return True
    raise _Invalid("Input should be a valid boolean, unable to interpret input")


def _number(kind: type, low: Any, high: Any) -> Any:
    def coerce(value: Any, ctx: Any) -> Any:
        if isinstance(value, bool):
            raise _Invalid(_INT_ERROR if kind is int else _FLOAT_ERROR)
        if isinstance(value, str) and not value.isascii():  # int('٤') is 4 (values.number)
            raise _Invalid(_INT_ERROR if kind is int else _FLOAT_ERROR)
        try:
            number = kind(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise _Invalid(_INT_ERROR if kind is int else _FLOAT_ERROR) from None
        if low is not None and number < low:
            raise _Invalid(f"Input should be greater than or equal to {low}")
        if high is not None and number > high:
            raise _Invalid(f"Input should be less than or equal to {high}")
        return number
    return coerce


def ascii_number_type(click_type: Any) -> Any:
    """`click_type` (a click int or float type, ranges included) wrapped to refuse values
    that are not ASCII before converting them as it does; None for any other type, or
    one already wrapped. Subclasses click's public ParamType."""
    name = str(getattr(click_type, "name", ""))
    if click_type is None or getattr(click_type, "ascii_only", False) or name not in (
            "integer", "float", "integer range", "float range"):
        return None
    base = _click_module("types").ParamType

    class AsciiNumber(base):  # type: ignore[misc, valid-type]
        ascii_only = True

        def __init__(self) -> None:
            self.name = name
            self.inner = click_type

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, str) and not value.isascii():
                kind = "integer" if "integer" in name else "number"
                self.fail(f"{value!r} is not a valid {kind} (digits 0-9 only)", param, ctx)
            return self.inner.convert(value, param, ctx)

        def get_metavar(self, *args: Any, **kwargs: Any) -> Any:
            return self.inner.get_metavar(*args, **kwargs)

    return AsciiNumber()


def hide_number_range(param: Any) -> None:
    """Keep `param`'s bounds out of its help (issue 25, point 10: no `1<=x<=10000` or
    `0<=x<=9223372036854775807`; a bound that matters is said in words in the option's
    help). The bounds still apply to the value given.

    typer >= 0.29 builds the `[default: ..; range]` text (plain and rich help alike) from
    the parameter's private `_get_number_range_help_str`, overridden here on this
    parameter only. Older typers ask click, which describes the range of a click range
    type only: the ASCII-only wrapper (ascii_number_type) that plain_words puts around
    every number type is not one, so nothing is added there."""
    if callable(getattr(param, "_get_number_range_help_str", None)):
        param._get_number_range_help_str = _no_range


def _no_range() -> None:
    return None


# The typers whose private `_TyperParameter.get_runtime_param` the fast coercion
# replaces: the ones CI tests (pyproject.toml bounds typer below the next one). Any other
# typer keeps its own coercion: slower by the pydantic import, never broken by a change
# of its internals.
TESTED_TYPER = ("0.29",)


def install_fast_coercion() -> None:
    """Let typer 0.29 coerce plain parameters without building pydantic adapters.

    A command run then costs no pydantic import (issue 11: per-command CPU).
    Parameters of other types keep typer's own coercion. No-op on typers that
    coerce through click's types (no pydantic there), and on typers not tested
    (TESTED_TYPER): their private internals may differ.
    """
    import typer

    if ".".join(str(getattr(typer, "__version__", "")).split(".")[:2]) not in TESTED_TYPER:
        return
    try:
        from typer import core
        from typer._coercion import RuntimeParam
    except ImportError:
        return
    param_class = getattr(core, "_TyperParameter", None)
    original = getattr(param_class, "get_runtime_param", None)
    if param_class is None or original is None or getattr(original, "_runnerq_fast", False):
        return
    bad_parameter = click_exceptions().BadParameter

    class _FastRuntimeParam(RuntimeParam):
        def __init__(self, base: Any, coerce: Any) -> None:
            object.__setattr__(self, "parameter_info", base.parameter_info)
            object.__setattr__(self, "annotation", base.annotation)
            object.__setattr__(self, "_coerce", coerce)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self._coerce(value, ctx)  # type: ignore[attr-defined]  # set in __init__
            except _Invalid as exc:
                raise bad_parameter(str(exc), ctx=ctx, param=param) from None

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            coerce = (None if desc.file_annotation is not None
                      else _fast_coercer(desc.annotation, desc.parameter_info))
            if coerce is None:
                return original(self)
            self._runtime_param = _FastRuntimeParam(desc, coerce)
        return self._runtime_param

    get_runtime_param._runnerq_fast = True  # type: ignore[attr-defined]
    param_class.get_runtime_param = get_runtime_param

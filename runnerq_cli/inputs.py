"""Input files and YAML text, read the one way every command reads them (docs/input.md,
"Paths" and "YAML").

`open_input` opens a file a command reads (`--payload @FILE`, `enqueue --from`,
`dlq import`, `--config`, `schedule apply`, `console --token-file` and `--ui`) without
ever blocking: opening a FIFO nothing writes to would wait for a writer forever (and
Python restarts the open a signal interrupts, so not even SIGTERM would end it). The
file is opened non-blocking and a FIFO is asked at once whether it has a writer: a
pipe from `<(command)` or a writer already waiting in its own open has one, and reads
as usual; a FIFO with none is refused. A device is refused unless it is a terminal or
/dev/null: /dev/zero and /dev/urandom never end.

`load_yaml` is yaml's safe loader refusing aliases (a few hundred bytes of nested
aliases, an "alias bomb", would expand to gigabytes) and keys given twice (YAML keeps
the last one silently), with every failure, deep nesting and over-long integers
included, as one `YAMLRefused` line. `json_data` refuses what YAML has and JSON has not
(NaN, bytes, dates, sets) in data that must be JSON, such as a schedule's payload.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from runnerq_cli.errors import InvalidArgument

CHUNK = 1 << 16


class Unreadable(InvalidArgument):
    """A file `open_input` refuses: "WHAT: cannot read PATH: REASON", `reason` alone."""

    def __init__(self, what: str, path: str, reason: str) -> None:
        from runnerq_cli.values import shown

        super().__init__(f"{what}: cannot read {shown(path)}: {reason}")
        self.reason = reason


class InputFile:
    """A descriptor opened by `open_input` (blocking again), with the bytes the FIFO probe
    read first (`head`): read them before reading `fd`. Binary, read-only."""

    def __init__(self, fd: int, head: bytes = b"") -> None:
        self.fd = fd
        self.head = head

    def take_head(self) -> bytes:
        head, self.head = self.head, b""
        return head

    def read(self, limit: int) -> bytes:
        """At most `limit` bytes (fewer only at the end), the head first."""
        parts = [self.take_head()]
        size = len(parts[0])
        while size < limit:
            chunk = os.read(self.fd, min(CHUNK, limit - size))
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> InputFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _null_device() -> int | None:
    try:
        return os.stat(os.devnull).st_rdev
    except OSError:
        return None


def open_input(path: str, what: str) -> InputFile:
    """Open `path` to read it (module docstring); InvalidArgument, one line naming `what`
    and the path, for a directory, a missing or unreadable file, a device, or a FIFO
    with no writer."""
    if os.path.isdir(path):
        raise Unreadable(what, path, "it is a directory")
    if not os.path.exists(path):
        raise Unreadable(what, path, "no such file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Unreadable(what, path, exc.strerror or str(exc)) from None
    try:
        info = os.fstat(fd)
        mode = info.st_mode
        head = b""
        if stat.S_ISDIR(mode):
            raise Unreadable(what, path, "it is a directory")
        if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) and not os.isatty(fd) \
                and info.st_rdev != _null_device():
            raise Unreadable(what, path, "it is a device, not a file")
        if stat.S_ISFIFO(mode):
            try:
                head = os.read(fd, CHUNK)
            except BlockingIOError:  # a writer, nothing written yet: it will come
                pass
            else:
                if not head:
                    raise Unreadable(what, path, "it is a FIFO with nothing writing to it")
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise Unreadable(what, path, exc.strerror or str(exc)) from None
    except BaseException:
        os.close(fd)
        raise
    return InputFile(fd, head)


def read_input(path: str, what: str, limit: int) -> bytes:
    """The whole of `path` if it holds at most `limit` bytes; one byte more says it holds
    more (the caller refuses it)."""
    with open_input(path, what) as handle:
        try:
            return handle.read(limit + 1)
        except OSError as exc:
            raise Unreadable(what, path, exc.strerror or str(exc)) from None


class YAMLRefused(ValueError):
    """YAML text that `load_yaml` refuses; its message is one line."""


# YAML 1.2's numbers (its core schema), decimal only: the digits a reader sees are the
# number. YAML 1.1, PyYAML's default, reads `010` as 8, `1:30` as 90, `0x10` as 16 and
# `1_000` as 1000; here `010` is 10 and the others stay text, refused where a number is
# expected as on the command line (`concurrency: 0x10` is no more a number than
# `--concurrency 0x10`).
_INT = r"[-+]?[0-9]+"
_FLOAT = (r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?"
          r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")


def _decimal_numbers(loader: Any) -> None:
    """Make `loader` (a SafeLoader subclass) resolve and build numbers as YAML 1.2's
    core schema does, decimal only (see _INT, _FLOAT)."""
    import re

    int_tag, float_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (int_tag, float_tag)]
        for first, resolvers in loader.yaml_implicit_resolvers.items()}
    loader.add_implicit_resolver(int_tag, re.compile(f"^(?:{_INT})$"), list("-+0123456789"))
    loader.add_implicit_resolver(float_tag, re.compile(f"^(?:{_FLOAT})$"),
                                 list("-+0123456789."))
    # An explicit `!!int 010` is decimal too (SafeLoader's reads it as octal).
    loader.add_constructor(int_tag, lambda self, node: _decimal(self.construct_scalar(node)))


def _decimal(text: str) -> int:
    import re

    if not re.fullmatch(_INT, text):
        raise ValueError(f"{text[:40]!r} is not a decimal whole number")
    return int(text, 10)


def load_yaml(text: str, where: str) -> Any:
    """The data of YAML `text`: safe types only, no aliases, no key twice in a mapping.
    `where` finishes "aliases (*name) are not allowed in ...". YAMLRefused otherwise."""
    import yaml

    from runnerq_cli.values import shown

    class NoAliasLoader(yaml.SafeLoader):
        """No aliases, no duplicate keys."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"aliases (*name) are not allowed in {where}",
                    event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            """A key given twice is refused: YAML would keep the last silently, so a
            second `lease:` further down would win over the one the reader sees."""
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: the base class refuses it
                    break
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {shown(key)}", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    _decimal_numbers(NoAliasLoader)
    try:
        return yaml.load(text, Loader=NoAliasLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise YAMLRefused(f"malformed YAML{at}: {shown(problem)[1:-1]}") from None
    except RecursionError:
        raise YAMLRefused("malformed YAML: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise YAMLRefused(f"malformed YAML: {shown(' '.join(str(exc).split()))[1:-1]}") \
            from None


def json_data(value: Any, what: str = "payload") -> None:
    """Raise unless `value` is JSON data: mappings with text keys, lists, text, finite
    numbers, booleans and null. For data from YAML, which also has NaN and infinities
    (`.nan`), bytes (`!!binary`), dates, times and sets, none of them JSON: a payload
    is a JSON object, whatever file it was written in."""
    from runnerq_cli.values import JSON_MAX_DEPTH, nested_deeper_than, shown

    if nested_deeper_than(value if isinstance(value, Mapping) else {"": value}):
        raise InvalidArgument(f"{what}: nested deeper than {JSON_MAX_DEPTH} levels")
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    raise InvalidArgument(f"{what}: a key must be text, got {shown(key)}")
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidArgument(f"{what}: numbers must be finite, got {shown(item)}")
        elif not (item is None or isinstance(item, str | int | float)):  # bool is an int
            raise InvalidArgument(f"{what}: {shown(item)} is not JSON (a "
                                  f"{type(item).__name__}); quote it to make it text")

"""`--payload @FILE` and `--payload @-`: a payload's JSON read from a file or standard
input, refused at once when longer than any storable payload.

Apart from the enqueue command because a payload given inline (`-p '{...}'`, a CI step's
usual form) reads nothing: that enqueue need not compile this (benchmarks/
bench_cli_startup.py part 2)."""

from __future__ import annotations

import sys
from typing import Any

from runnerq_cli import values
from runnerq_cli.errors import InvalidArgument


def read_payload_file(name: str) -> dict[str, Any]:
    """The JSON object in file `name`, or on standard input for `-`."""
    if name == "-":
        return values.json_object(_read_payload_text(_stdin(), "payload from stdin"),
                                  "payload from stdin")
    from runnerq_cli.inputs import Unreadable, open_input

    with open_input(name, "--payload") as handle:
        try:
            text = _read_payload_text(handle, f"--payload file {name}")
        except OSError as exc:
            raise Unreadable("--payload", name, exc.strerror or str(exc)) from None
    return values.json_object(text, f"--payload file {name}")


def _read_payload_text(stream: Any, what: str) -> str | bytes:
    """A payload's JSON text from `stream`, refusing text too long for any storable payload."""
    text: str | bytes = stream.read(values.PAYLOAD_TEXT_MAX + 1)
    if len(text) > values.PAYLOAD_TEXT_MAX:
        raise InvalidArgument(f"{what}: more than {values.PAYLOAD_TEXT_MAX} bytes of JSON; a "
                              f"payload may take at most {values.PAYLOAD_MAX_BYTES} bytes "
                              "as BSON (7.5 MiB)")
    return text


def _stdin() -> Any:
    """Standard input as bytes where there are bytes (UTF-8 is checked by the parser)."""
    return getattr(sys.stdin, "buffer", None) or sys.stdin

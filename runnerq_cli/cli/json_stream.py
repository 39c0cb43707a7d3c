"""`-o json` of a command whose list can be long, written as it grows (JsonObjectStream).

Apart from output.py: only `enqueue --from` and `dlq import` stream, and every other
command run (a CI step's one `enqueue`, say) would compile it for nothing
(benchmarks/unrun_code.py).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from runnerq_cli.cli.output import jsonable


class JsonObjectStream:
    """`-o json` of a command whose list can be long (`enqueue --from`, `dlq import`): one
    JSON object written as it grows, the list under `key` an item at a time and the other
    fields when it is closed, so memory does not grow with the list. Pretty on a
    terminal, one line in a pipe, as print_json; the list comes first among the keys.
    Nothing is written before the first item or the close."""

    def __init__(self, key: str) -> None:
        self._key = json.dumps(key)
        self._items = 0
        self._pretty = sys.stdout.isatty()

    def add(self, item: Any) -> None:
        if self._pretty:
            text = "    " + json.dumps(jsonable(item), indent=2).replace("\n", "\n    ")
            lead = f"{{\n  {self._key}: [\n" if not self._items else ",\n"
        else:
            text = json.dumps(jsonable(item))
            lead = f"{{{self._key}: [" if not self._items else ", "
        sys.stdout.write(lead + text)
        self._items += 1

    def close(self, fields: dict[str, Any]) -> None:
        """End the list and the object with `fields` (in their order)."""
        if self._pretty:
            out = (f"{{\n  {self._key}: [" if not self._items else "\n  ") + "]"
            out += "".join(f",\n  {json.dumps(k)}: "
                           + json.dumps(jsonable(v), indent=2).replace("\n", "\n  ")
                           for k, v in fields.items()) + "\n}\n"
        else:
            out = (f"{{{self._key}: [" if not self._items else "") + "]"
            out += "".join(f", {json.dumps(k)}: {json.dumps(jsonable(v))}"
                           for k, v in fields.items()) + "}\n"
        sys.stdout.write(out)
        sys.stdout.flush()

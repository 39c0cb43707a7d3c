"""The lines of a dead-letter import file, parsed: pure, so `dlq import` checks each one
before it connects; ops/dlq.py writes them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from runnerq_cli.backend.domain.specs import ActivitySpec
from runnerq_cli.errors import InvalidArgument


@dataclass(frozen=True)
class ImportLine:
    """One parsed line of an import file: its spec, or why it is invalid."""

    line: int
    original_id: uuid.UUID | None = None
    spec: ActivitySpec | None = None
    error: str | None = None
    size: int = 0  # bytes of the line (a batch is bounded in bytes too)



def parse_import_line(number: int, raw: str | bytes) -> ImportLine:
    """One line of an import file: its spec and original id, or why it is refused.

    Invalid UTF-8, malformed JSON and nesting beyond the limit refuse this
    line alone (values.json_value), like `enqueue --from`.
    """
    from runnerq_cli import values
    from runnerq_cli.backend.domain.models import parse_activity_id
    from runnerq_cli.backend.domain.spec_lines import spec_from_data

    original = None
    try:
        data = values.json_value(raw, "")
        if isinstance(data, dict) and data.get("original_id") is not None:
            original = parse_activity_id(str(data["original_id"]))
        return ImportLine(number, original, spec_from_data(data, {}), size=len(raw))
    except InvalidArgument as exc:
        return ImportLine(number, original, error=str(exc), size=len(raw))

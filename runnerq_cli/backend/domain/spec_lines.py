"""Activity specs from NDJSON lines and decoded data: `enqueue --from`, `dlq import`.

One line is one JSON object whose fields are LINE_FIELDS; each value goes through
`spec_options` (specs.py), the flags' own parser, so a line and a flag are refused
with the same message. Apart from specs.py since a plain enqueue reads no line and
need not compile this where byte-code is not cached (benchmarks/bench_cli_startup.py).
"""

from __future__ import annotations

from typing import Any

from runnerq_cli import values
from runnerq_cli.backend.domain.models import EXPORT_INFO_FIELDS
from runnerq_cli.backend.domain.specs import ActivitySpec, flow_key, spec_options
from runnerq_cli.errors import InvalidArgument

# Fields of one NDJSON line of `enqueue --from` (and the ActivitySpec option each feeds).
LINE_FIELDS = ("type", "activity_type", "payload", "priority", "delay", "at", "max_retries",
               "timeout", "retry_delay", "metadata", "idempotency_key", "on_duplicate", "key")



def spec_from_line(text: str | bytes, defaults: dict[str, Any]) -> ActivitySpec:
    """One NDJSON line into an ActivitySpec; InvalidArgument with the reason otherwise."""
    return spec_from_data(values.json_value(text, ""), defaults)


def spec_from_data(data: Any, defaults: dict[str, Any]) -> ActivitySpec:
    """A decoded NDJSON line (see `spec_from_line`) into an ActivitySpec."""
    if not isinstance(data, dict):
        raise InvalidArgument("expected a JSON object per line")
    # A `dlq export` line's provenance fields are ignored; any other unknown one is a typo.
    unknown = sorted(set(data) - set(LINE_FIELDS) - set(EXPORT_INFO_FIELDS))
    if unknown:
        raise InvalidArgument(f"unknown field {unknown[0]!r} (known: {', '.join(LINE_FIELDS)})")
    if "type" in data and "activity_type" in data and data["type"] != data["activity_type"]:
        raise InvalidArgument("give type or activity_type, not both")
    activity_type = data.get("type", data.get("activity_type"))
    if not isinstance(activity_type, str) or not activity_type.strip():
        raise InvalidArgument("missing activity type (field 'type')")
    payload = data.get("payload", {})
    if not isinstance(payload, dict):
        raise InvalidArgument("payload must be a JSON object")
    metadata = data.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(v, str) for v in metadata.values())):
        raise InvalidArgument("metadata must be an object of strings")
    options = dict(defaults)
    if "delay" in data or "at" in data:  # a line's own schedule replaces the flag's
        options.pop("delay_seconds", None)
        options.pop("scheduled_at", None)
    options.update(spec_options(
        priority=data.get("priority"), delay=data.get("delay"), at=data.get("at"),
        max_retries=data.get("max_retries"), timeout=data.get("timeout"),
        retry_delay=data.get("retry_delay"),
        metadata={**defaults.get("metadata", {}), **(metadata or {})} or None,
        idempotency_key=data.get("idempotency_key"), on_duplicate=data.get("on_duplicate")))
    if "key" in data:  # a line's own key replaces the flag's
        options["key"] = flow_key(data["key"])
    return ActivitySpec(activity_type, payload, **options)

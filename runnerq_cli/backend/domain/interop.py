"""Encodings RunnerQ's SDKs share, so keys and values read the same whatever wrote them.

RunnerQ's spec (runnerq/runnerq-spec) pins these with golden vectors
(tests/test_spec_vectors.py restates them):

- a **business key** is how the SDKs write an application's idempotency key with its
  activity type as one string (`rq:key:v2:` + unpadded base64 of `<byte length>:<key><type>`,
  the length making the split unambiguous); the conformance driver's `lookup_key` takes
  one, while we store the key and the type apart ([Idempotency keys] in docs/design.md);
- the **application key** is the key an application set, recovered from whatever another
  SDK stored (a business key, a legacy `<key>-<type>`, a step key, a raw key);
- **plain JSON** is how a stored value shows outside the SDK that wrote it: a TypeScript
  SDK's `superjson-v1` envelope shows its `json` member.

Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

BUSINESS_KEY_PREFIX = "rq:key:v2:"
STEP_KEY_PREFIX = "rq:step:"
JSON_V1 = "json-v1"
SUPERJSON_V1 = "superjson-v1"


def business_key(key: str, activity_type: str) -> str:
    """The spec's BusinessKey(key, activity_type)."""
    data = f"{len(key.encode('utf-8'))}:{key}{activity_type}".encode()
    return BUSINESS_KEY_PREFIX + base64.b64encode(data).decode("ascii").rstrip("=")


def split_business_key(stored: str) -> tuple[str, str] | None:
    """The (key, activity_type) a canonical business key encodes, else None.

    Canonical: re-encoding gives the same string (so padded base64, or a length that
    runs past the end, is no business key)."""
    if not stored.startswith(BUSINESS_KEY_PREFIX):
        return None
    text = stored[len(BUSINESS_KEY_PREFIX):]
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    length, colon, rest = raw.partition(b":")
    if not colon or not length.isdigit() or int(length) > len(rest):
        return None
    try:
        key = rest[:int(length)].decode("utf-8")
        activity_type = rest[int(length):].decode("utf-8")
    except UnicodeDecodeError:
        return None
    if business_key(key, activity_type) != stored:
        return None
    return key, activity_type


def application_key(stored: str, activity_type: str) -> str:
    """The spec's ApplicationKey(stored, activity_type): the key the application set."""
    if not stored or stored.startswith(STEP_KEY_PREFIX):
        return ""
    split = split_business_key(stored)
    if split is not None:
        return split[0] if split[1] == activity_type else stored
    if stored.startswith(BUSINESS_KEY_PREFIX):
        return stored
    suffix = "-" + activity_type
    if stored.endswith(suffix) and len(stored) > len(suffix):
        return stored[:-len(suffix)]
    return stored


def plain_json(serialization: str, data: Any) -> Any:
    """The spec's PlainJSON(serialization, data): what a stored value shows outside its
    SDK. `json-v1` (or empty) passes through; `superjson-v1` shows its envelope's `json`
    member, and data that is no such envelope passes through."""
    if serialization == SUPERJSON_V1 and isinstance(data, dict) and "json" in data:
        return data["json"]
    return data

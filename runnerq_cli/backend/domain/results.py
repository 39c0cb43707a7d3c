"""What a success's result may be, and when two results are the same.

A result is a JSON value (RunnerQ's results are `serde_json` values; `result -o json`
prints it): `checked_result` refuses anything else before a write is sent (NaN and
Infinity, which JSON has no numbers for; objects JSON cannot hold; integers past 64
bits; nesting deeper than JSON_MAX_DEPTH; more than RESULT_MAX_BYTES as BSON), so
the server never refuses half a batch of acknowledgements, and a hostile value (a
subclass whose methods answer differently each time) is stored as it was checked.

`same_value` decides whether a repeated success says the same as the stored one
(docs/design.md, "How results are compared").
"""

from __future__ import annotations

import math
from typing import Any

from runnerq_cli import values
from runnerq_cli.backend.domain.error_text import describe
from runnerq_cli.backend.domain.sizes import RESULT_MAX_BYTES
from runnerq_cli.errors import InvalidArgument
from runnerq_cli.plural import counted


def checked_result(value: Any, what: str = "result") -> Any:
    """`value` as it will be stored (its BSON, encoded once and not again), or
    InvalidArgument saying why it cannot be a result. `what` names the value in the
    message (a signal's payload is stored as a result, but its sender gave a payload)."""
    import json

    import bson
    from bson.raw_bson import RawBSONDocument

    not_json, unstorable = f"{what} is not JSON", f"{what} cannot be stored in MongoDB"
    why = not_json
    try:
        json.dumps(value, allow_nan=False)
        why = unstorable
        if values.nested_deeper_than({"data": value}):
            raise InvalidArgument(f"{why}: nested deeper than {values.JSON_MAX_DEPTH} levels")
        encoded = bson.encode({"data": value})
    except InvalidArgument:
        raise
    except RecursionError:
        raise InvalidArgument(f"{unstorable}: nested deeper than {values.JSON_MAX_DEPTH} "
                              "levels") from None
    except ValueError as exc:
        if why == not_json and "Out of range float" in describe(exc):
            raise InvalidArgument(f"{not_json}: it holds NaN or Infinity, which JSON has "
                                  "no numbers for") from None
        raise InvalidArgument(f"{why}: {describe(exc)}") from None
    except Exception as exc:  # a set, a date, an int past 64 bits, a non-string key, or
        # whatever a hostile subclass raises
        raise InvalidArgument(f"{why}: {describe(exc)}") from None
    if len(encoded) > RESULT_MAX_BYTES:
        raise InvalidArgument(f"{unstorable}: {counted(len(encoded), 'byte')} as BSON, more "
                              f"than {RESULT_MAX_BYTES}")
    # Raw BSON: the driver copies these bytes into the command instead of encoding
    # the value again (which a hostile value could make come out differently).
    return RawBSONDocument(encoded)["data"]


def same_value(stored: Any, given: Any) -> bool:
    """Whether `given` says what `stored` (a decoded stored value) says.

    Numbers, booleans and NaN as MongoDB's equality does: numbers by value whatever
    their BSON type (1 equals 1.0 and Int64(1)), booleans only equal booleans (true is
    not 1), NaN equals NaN. Documents by their fields whatever their order (unlike
    MongoDB: a JSON object has no order), arrays in order. A value that
    cannot be encoded is never the same.
    """
    import bson

    try:
        again: Any = bson.decode(bson.encode({"v": given}), codec_options=bson.CodecOptions(
            tz_aware=True, uuid_representation=4))["v"]
    except Exception:
        return False
    return _same(stored, again)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return bool(a == b)

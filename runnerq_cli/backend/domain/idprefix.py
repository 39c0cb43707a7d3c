"""Activity ids given as a unique prefix (`3f0c2a9e`), as git and docker accept them.

Text views show an id's first hex digits; this maps such a prefix back to the
one activity it names. An activity's `_id` is a UUID stored as BSON binary
subtype 4 of 16 bytes, and binaries of one length and subtype compare byte by
byte, so the prefix `3f0c2a9e` is the range [3f0c2a9e00..00, 3f0c2a9eff..ff]:
one indexed range query on `_id`, never a scan.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from runnerq_cli.errors import InvalidArgument, NotFound
from runnerq_cli.plural import counted

PREFIX_MIN = 8  # hex digits: shorter prefixes match too much to be worth a query
SHOWN_CANDIDATES = 100  # an ambiguous prefix counts its matches up to this many
_HEX = re.compile(r"[0-9a-f]+")


def prefix_of(text: str) -> str | None:
    """The hex digits of `text` if it is an id prefix (dashes allowed), else None."""
    digits = text.strip().lower().replace("-", "")
    if PREFIX_MIN <= len(digits) < 32 and _HEX.fullmatch(digits):
        return digits
    return None


def id_range(digits: str) -> tuple[Any, Any]:
    """The lowest and highest stored `_id` that start with the hex `digits`."""
    from bson.binary import Binary, UuidRepresentation

    low = uuid.UUID(hex=digits.ljust(32, "0"))
    high = uuid.UUID(hex=digits.ljust(32, "f"))
    return (Binary.from_uuid(low, UuidRepresentation.STANDARD),
            Binary.from_uuid(high, UuidRepresentation.STANDARD))


def matching_ids(activities: Any, digits: str, limit: int = SHOWN_CANDIDATES) -> list[uuid.UUID]:
    """The ids in the activities collection that start with `digits` (at most `limit`)."""
    low, high = id_range(digits)
    cursor = activities.find({"_id": {"$gte": low, "$lte": high}}, {"_id": 1},
                             limit=limit).sort("_id", 1)
    return [doc["_id"] for doc in cursor if isinstance(doc.get("_id"), uuid.UUID)]


def resolve(activities: Any, text: str) -> uuid.UUID:
    """The one activity id that `text` (a full UUID or a prefix of >= 8 hex digits) names.

    A full UUID is returned as it is (whether it exists is the caller's
    question). A prefix no activity has is NotFound; a prefix two or
    more share is InvalidArgument saying how many; anything else is
    InvalidArgument naming what an id looks like.
    """
    from runnerq_cli.backend.domain.models import parse_activity_id

    digits = prefix_of(text) if isinstance(text, str) else None
    if digits is None:
        try:
            return parse_activity_id(text)
        except InvalidArgument:
            from runnerq_cli.values import shown

            raise InvalidArgument(f"invalid activity id {shown(text)}: expected a UUID or "
                                  f"its first {PREFIX_MIN} or more hex digits") from None
    found = matching_ids(activities, digits, limit=SHOWN_CANDIDATES + 1)
    if not found:
        raise NotFound(f"no activity id starts with {digits}")
    if len(found) > 1:
        count = (f"more than {SHOWN_CANDIDATES}" if len(found) > SHOWN_CANDIDATES
                 else str(len(found)))
        raise InvalidArgument(f"id prefix {digits} is ambiguous: "
                              f"{counted(2, 'activity', number=count)} start with it "
                              "(give more digits)")
    return found[0]

"""Sizes and bounds, defined once: the parts use them and the facade's signatures name them
as defaults without importing the parts (api.py makes parts on first use).

The bounds of stored values (docs/design.md, "Bounds of stored values") keep every
document a write makes below MongoDB's 16 MiB limit, whatever a handler or a caller gives.
"""

BULK_BATCH_SIZE = 500  # ids per fenced batch of a bulk action (batches.py)
IMPORT_BATCH = 500  # lines per batch of a dead-letter import (dlq.py)

# An error text as stored (`last_error`, the failure's event, its Err result, the
# dead-letter record: up to four copies in one activity update, beside its payload),
# in UTF-8 bytes; longer texts are cut (error_text.py).
ERROR_TEXT_MAX_BYTES = 4096
# A success's result, as BSON (`{data: RESULT}`); a larger one is refused (results.py).
RESULT_MAX_BYTES = 8 * 1024 * 1024

"""Sizes, defined once: the bound of every stored value, and batch sizes.

Each bound a user gives is enforced where the value enters (values.py, ActivitySpec),
before anything is sent: a command-line value over it is one `error:` line and exit 2, an
API call an `InvalidArgument` naming the parameter; what a handler gives (its error text,
its result) is cut or refused where the worker writes it (error_text.py, results.py).
Together they keep an activity document below MongoDB's 16 MiB (docs/design.md,
"Bounds of stored values"). Free of imports: values.py, the facade's signatures and the
CLI read these without loading any part.
"""

BSON_DOCUMENT_MAX = 16 * 1024 * 1024  # MongoDB's limit for one document

# An error text as stored (`last_error`, the failure's event, its Err result, the
# dead-letter record: up to four copies in one activity update, beside its payload),
# in UTF-8 bytes; longer texts are cut (error_text.py).
ERROR_TEXT_MAX_BYTES = 4096
# A success's result, as BSON (`{data: RESULT}`); a larger one is refused (results.py).
RESULT_MAX_BYTES = 8 * 1024 * 1024

# The activity document carries the payload and, later, the result (RESULT_MAX_BYTES
# above): the payload gets what is left, with HEADROOM for the other fields.
HEADROOM = 512 * 1024
PAYLOAD_MAX_BYTES = BSON_DOCUMENT_MAX - RESULT_MAX_BYTES - HEADROOM  # as BSON: 7.5 MiB
# JSON text can be longer than its BSON (spaces, escapes), but not by this much: a
# longer payload text or NDJSON line is refused unread (memory stays bounded).
PAYLOAD_TEXT_MAX = 64 * 1024 * 1024

# The small fields, all in the headroom together (200 * 4 + 64 KiB + 1 KiB + the
# fixed fields is well under 512 KiB):
ACTIVITY_TYPE_MAX = 200  # characters: in the claim indexes' keys
METADATA_KEY_MAX = 100  # characters: filtered on as `metadata.KEY`
METADATA_VALUE_MAX_BYTES = 4 * 1024  # UTF-8 bytes of one tag's value
METADATA_MAX_BYTES = 64 * 1024  # the whole metadata document, as BSON
IDEMPOTENCY_KEY_MAX_BYTES = 1024  # UTF-8 bytes: in two unique indexes' keys

BULK_BATCH_SIZE = 500  # ids per fenced batch of a bulk action (batches.py)
MAX_BULK = 10_000  # largest --max: one action, one audit record, one report (bulk.py)
IMPORT_BATCH = 500  # lines per batch of a dead-letter import (dlq.py)
# A batch of lines (enqueue --from, dlq import) also ends at this many bytes of input:
# what one batch holds at once (its lines, their decoded values, their BSON) stays a
# few times this, whatever the batch size and the lines' sizes.
INPUT_BATCH_BYTES = 4 * 1024 * 1024

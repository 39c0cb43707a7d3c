"""Batch sizes, defined once: the parts use them and the facade's signatures name them
as defaults without importing the parts (api.py makes parts on first use)."""

BULK_BATCH_SIZE = 500  # ids per fenced batch of a bulk action (batches.py)
IMPORT_BATCH = 500  # lines per batch of a dead-letter import (dlq.py)

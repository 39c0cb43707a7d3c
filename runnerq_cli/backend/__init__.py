"""The pymongo backend: RunnerQ's queue and inspection operations on MongoDB.

Nothing here writes to a terminal. Importing this package is cheap; the
pymongo-based modules load when first used.
"""

# The backend's log records (maintenance, skipped malformed documents): a child of the
# `runnerq` logger the worker configures (worker/logs.py).
LOGGER_NAME = "runnerq.backend"

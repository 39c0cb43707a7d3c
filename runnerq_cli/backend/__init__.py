"""The pymongo backend: RunnerQ's queue and inspection operations on MongoDB.

Nothing here writes to a terminal. Importing this package is cheap; the
pymongo-based modules load when first used.
"""

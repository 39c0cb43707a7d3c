"""The `runnerq-mongo worker` engine and its embedding API (see `api.py`)."""

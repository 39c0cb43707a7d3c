"""The `runnerq-mongo` command line: thin commands over the backend.

Command modules import the backend inside their functions, never at module
level, so that `--help` and shell completion stay fast (pymongo alone takes
about 0.2 s to import).
"""

"""`python -m runnerq_cli`."""

from runnerq_cli.cli.app import run

run()

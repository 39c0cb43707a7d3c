"""`python -m runnerq_cli.conformance`: the conformance driver (see __init__.py)."""

from runnerq_cli.conformance.driver import main

raise SystemExit(main())

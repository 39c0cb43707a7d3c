"""RunnerQ's conformance driver over this backend: `python -m runnerq_cli.conformance`.

RunnerQ's spec (runnerq/runnerq-spec, `conformance/README.md`, 0.7/0.8) checks every
implementation's storage with scenarios a runner plays through a *driver*: a process that
reads one JSON request a line on standard input (`{"op": ..., "args": {...}}`) and
answers each with one line on standard output (`{"ok": {...}}` or `{"error": {"kind",
"message"}}`, `kind` one of the spec's storage error kinds). This package is ours, so any
runner (the spec's own, written in Go, or tests/test_conformance.py) can drive this backend.

The driver keeps no state between requests but the queue `open` chose: a claim travels as
`{"id", "token"}` (the token is our `lease_id`) and is rebuilt from the activity document
for each request. Nothing but replies reaches standard output; errors are reply lines,
never tracebacks (an unexpected one goes to standard error, its reply says `internal`).
"""

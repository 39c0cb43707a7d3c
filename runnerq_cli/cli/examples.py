"""The "Examples:" epilog of each command's --help (tests/test_docs.py checks they parse).

Kept in one table so every command has one or two, written alike; each
command's registration attaches its own with `epilog=examples("NAME")`.
"""

from __future__ import annotations

ID = "0f8fad5b-d9cb-469f-a165-70867728950e"

EXAMPLES: dict[str, tuple[str, ...]] = {
    "config show": ("runnerq-mongo config show",
                    "runnerq-mongo --config ./runnerq.yaml config show -o json"),
    "init-indexes": ("runnerq-mongo init-indexes --check    # exit 7 if anything is missing",
                     "runnerq-mongo init-indexes --partitions 4    # before sharding"),
    "enqueue": ("runnerq-mongo enqueue send_email -p '{\"to\": \"a@example.com\"}' "
                "--priority high",
                "runnerq-mongo enqueue --from jobs.ndjson -q    # one activity per line"),
    "console": ("runnerq-mongo console --port 8081 --allow-actions",
                "runnerq-mongo console --ui runnerq-console.html    # RunnerQ's page, read-only"),
    "dev-server": ("runnerq-mongo dev-server --port 27018",
                   "runnerq-mongo dev-server --path dev.sqlite --init"),
    "worker": ("runnerq-mongo worker --handler send_email=myapp.tasks:send_email -n 8",
               "runnerq-mongo worker --exec resize='./resize.sh' --burst"),
    "tail events": ("runnerq-mongo tail events --type send_email",
                    "runnerq-mongo tail events --since 10m --no-follow -o jsonl"),
    "stats": ("runnerq-mongo stats --by error --since 6h",
              "runnerq-mongo stats --check 'dead_letter == 0' --check 'oldest_pending < 60s'"),
    "list": ("runnerq-mongo list pending --type send_email",
             "runnerq-mongo list dead-letter -o jsonl"),
    "show": (f"runnerq-mongo show {ID}",),
    "tree": (f"runnerq-mongo tree {ID}", f"runnerq-mongo tree {ID} -o json"),
    "signal": (f"runnerq-mongo signal {ID} approve --payload '{{\"by\": \"ana\"}}'",
               f"runnerq-mongo signal {ID} resume"),
    "events": (f"runnerq-mongo events {ID}",
               f"runnerq-mongo events {ID} --limit 5 -o json"),
    "result": (f"runnerq-mongo result {ID} -o json",),
    "wait": (f"runnerq-mongo wait {ID} --timeout 5m",),
    "workers": ("runnerq-mongo workers", "runnerq-mongo workers --stale-after 2m -o json"),
    "cancel": (f"runnerq-mongo cancel {ID} --reason 'duplicate order'",),
    "retry": (f"runnerq-mongo retry {ID}",
              "runnerq-mongo retry --status dead-letter --type charge --error-contains 502 "
              "--max 500 --dry-run"),
    "run-now": (f"runnerq-mongo run-now {ID}",),
    "reschedule": (f"runnerq-mongo reschedule {ID} --delay 1h",
                   f"runnerq-mongo reschedule {ID} --at 2030-01-01T09:00:00Z"),
    "set-priority": (f"runnerq-mongo set-priority {ID} critical",),
    "redrive": ("runnerq-mongo redrive --type send_email --dry-run",
                "runnerq-mongo redrive --yes"),
    "purge": ("runnerq-mongo purge --dry-run", "runnerq-mongo purge --yes"),
    "delete": ("runnerq-mongo delete --status completed --until 30d --max 1000 --dry-run",
               f"runnerq-mongo delete {ID} --reason 'test data'"),
    "pause": ("runnerq-mongo pause --type send_email --reason 'mail server down'",
              "runnerq-mongo pause    # the whole queue"),
    "resume": ("runnerq-mongo resume --type send_email", "runnerq-mongo resume"),
    "schedule add": ("runnerq-mongo schedule add nightly --type charge --cron '30 2 * * *' "
                     "--timezone Europe/Berlin",
                     "runnerq-mongo schedule add heartbeat --type ping --every 10m "
                     "--overlap skip"),
    "limit set": ("runnerq-mongo limit set charge --concurrency 5 --rate 100/1m",
                  "runnerq-mongo limit set import --key-limit 2 --reason 'tenants share'"),
    "limit list": ("runnerq-mongo limit list", "runnerq-mongo limit list -o json"),
    "limit show": ("runnerq-mongo limit show charge",),
    "limit remove": ("runnerq-mongo limit remove charge",),
    "limit apply": ("runnerq-mongo limit apply limits.yaml --dry-run",
                    "runnerq-mongo limit apply limits.yaml --prune"),
    "schedule list": ("runnerq-mongo schedule list", "runnerq-mongo schedule list -o json"),
    "schedule show": ("runnerq-mongo schedule show nightly --next 10",),
    "schedule pause": ("runnerq-mongo schedule pause nightly --reason 'billing freeze'",),
    "schedule resume": ("runnerq-mongo schedule resume nightly",),
    "schedule trigger": ("runnerq-mongo schedule trigger nightly",),
    "schedule remove": ("runnerq-mongo schedule remove nightly",),
    "schedule apply": ("runnerq-mongo schedule apply schedules.yaml --dry-run",
                       "runnerq-mongo schedule apply schedules.yaml --prune"),
    "scheduler": ("runnerq-mongo scheduler", "runnerq-mongo scheduler --once"),
    "dlq export": ("runnerq-mongo dlq export --type charge --since 1h -o failed.ndjson",),
    "dlq import": ("runnerq-mongo dlq import failed.ndjson --dry-run",
                   "runnerq-mongo dlq import failed.ndjson --redrive"),
    "audit": ("runnerq-mongo audit --since 1d",
              "runnerq-mongo audit --actor alice --action retry -o jsonl"),
    "doctor": ("runnerq-mongo doctor", "runnerq-mongo doctor --all-queues --strict -o json"),
    "explain": (f"runnerq-mongo explain {ID}", f"runnerq-mongo explain {ID} -o json"),
    "queues": ("runnerq-mongo queues", "runnerq-mongo queues -o jsonl"),
    "metrics serve": ("runnerq-mongo metrics serve --port 9464 --all-queues",),
    "completion show": ("source <(runnerq-mongo completion show bash)",),
    "completion install": ("runnerq-mongo completion install zsh",),
}


def examples(command: str) -> str:
    """The epilog for `command` (its path without the program name)."""
    # "\b" keeps click from re-wrapping the example lines into one paragraph.
    lines = "\n".join(f"  {line}" for line in EXAMPLES[command])
    return f"Examples:\n\n\b\n{lines}"

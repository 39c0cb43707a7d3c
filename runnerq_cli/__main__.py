"""`python -m runnerq_cli`, and the `runnerq-mongo` console script (`main`)."""

import sys


def main() -> None:
    # First thing, before typer, pymongo or a handler's module is imported: a worker
    # records SIGTERM/SIGINT from here on (worker/startup.py).
    from runnerq_cli.worker.startup import install_if_worker

    install_if_worker(sys.argv[1:])
    from runnerq_cli.cli.app import run

    run()


if __name__ == "__main__":
    main()

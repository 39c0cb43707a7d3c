"""`python -m runnerq_cli`, and the `runnerq-mongo` console script (`main`)."""

import sys


def main() -> None:
    from runnerq_cli.argv import command_word

    # First thing, before typer, pymongo or a handler's module is imported: a worker
    # records SIGTERM/SIGINT from here on (worker/startup.py). Any other command skips
    # that module (and `signal`): every command run pays for what it imports.
    if command_word(sys.argv[1:]) == "worker":
        from runnerq_cli.worker.startup import install_if_worker

        install_if_worker(sys.argv[1:])
    from runnerq_cli.cli.app import run

    run()


if __name__ == "__main__":
    main()

"""What open console pages cost the database: commands per minute against the number of pages.

Each simulated page does what a busy page does: it holds the live stream open
(`/api/stream`) and asks every second for RunnerQ's counts
(`/api/observability/stats`) and the stats snapshot with history (`/api/stats`).
The console shares the snapshot and the counts between pages for 2 s and reads
one tail for all streams (docs/console.md, "Cost"), so ten pages should cost
about what one does. The "unshared" column runs the same pages with the sharing
off (every request reads the database), what a console without it would cost.

Commands are counted from pymongo's command monitoring (wirecount.py), on the
server of RUNNERQ_BENCH_MONGO_URI or a dev server in a process of its own.

    python benchmarks/bench_console.py [--pages 0,1,2,5,10,20] [--seconds 20]
"""

from __future__ import annotations

import argparse
import http.client
import socket
import threading
import time
import uuid

from benchserver import start_server
from wirecount import WireCounter


def page(port: int, stop: threading.Event) -> None:
    """One open page: the stream held open, the counts and the snapshot every second."""
    stream = socket.create_connection(("127.0.0.1", port), timeout=60)
    stream.sendall(f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    reader = threading.Thread(target=_drain, args=(stream, stop), daemon=True)
    reader.start()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        while not stop.is_set():
            for path in ("/api/observability/stats", "/api/stats"):
                conn.request("GET", path)
                conn.getresponse().read()
            stop.wait(1.0)
    finally:
        conn.close()
        stream.close()


def _drain(sock: socket.socket, stop: threading.Event) -> None:
    try:
        while not stop.is_set() and sock.recv(65536):
            pass
    except OSError:
        pass


def measure(rq: object, counter: WireCounter, pages: int, seconds: float,
            shared: bool) -> float:
    """Commands per minute the console sends with `pages` pages open."""
    from runnerq_cli.console import endpoints
    from runnerq_cli.console.app import ConsoleConfig, serve

    endpoints.SHARED_SECONDS = 2.0 if shared else 0.0
    # every page from 127.0.0.1 here: the per-address share as for pages of many machines
    server = serve(rq, ConsoleConfig(port=0, max_per_address=64))  # type: ignore[arg-type]
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stop = threading.Event()
    threads = [threading.Thread(target=page, args=(port, stop), daemon=True)
               for _ in range(pages)]
    for t in threads:
        t.start()
    time.sleep(min(3.0, seconds / 4))  # pages open, tail started: then count
    counter.take()
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    commands = len(counter.take())
    stop.set()
    for t in threads:
        t.join(10)
    server.shutdown()
    server.server_close()
    return commands / elapsed * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", default="0,1,2,5,10,20",
                        help="numbers of open pages, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="measuring time per point (default 20)")
    args = parser.parse_args()
    counts = [int(n) for n in args.pages.split(",") if n.strip()]
    from pymongo import monitoring

    counter = WireCounter()
    monitoring.register(counter)  # before any client exists
    uri, proc = start_server()
    try:
        from runnerq_cli.backend.api import RunnerQ
        from runnerq_cli.config import load_settings

        settings = load_settings(None, overrides={
            "uri": uri, "database": f"bench_console_{uuid.uuid4().hex[:8]}", "queue": "bench"},
            environ={"RUNNERQ_CONFIG": ""})
        rq = RunnerQ(settings)
        rq.maintenance.init_indexes()
        for n in range(50):
            rq.enqueue("job" if n % 2 else "mail", {"n": n})
        print("| open pages | commands per minute (shared) | unshared |")
        print("| --- | --- | --- |")
        for pages in counts:
            shared = measure(rq, counter, pages, args.seconds, True)
            alone = measure(rq, counter, pages, args.seconds, False)
            print(f"| {pages} | {shared:,.0f} | {alone:,.0f} |", flush=True)
        from pymongo import MongoClient

        MongoClient(uri).drop_database(settings.database)
    finally:
        if proc is not None:
            proc.kill()


if __name__ == "__main__":
    main()

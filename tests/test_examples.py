"""The examples in examples/ run as written: the FastAPI app under its real ASGI server
(uvicorn, in this process) against the test server, requests over HTTP (httpx).

The app's lifespan starts its embedded worker and stops it at shutdown: a POST
enqueues with `await` and gets the worker's result back; the worker leaves the
registry when the server stops.
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from runnerq_cli.backend.api import RunnerQ
from runnerq_cli.backend.domain.models import Status

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_fastapi_example_enqueues_waits_and_runs_its_worker(
        backend: RunnerQ, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = backend.settings
    for key, value in {"RUNNERQ_MONGO_URI": settings.uri, "RUNNERQ_DATABASE": settings.database,
                       "RUNNERQ_QUEUE": settings.queue, "RUNNERQ_CONFIG": "",
                       "RUNNERQ_CONNECT_TIMEOUT": "30s",
                       "RUNNERQ_SERVER_SELECTION_TIMEOUT": "30s"}.items():
        monkeypatch.setenv(key, value)
    example = _load("fastapi_app")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(example.app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))

    async def scenario() -> tuple[list[Any], list[Any]]:
        serving = asyncio.create_task(server.serve())
        async with asyncio.timeout(30):
            while not server.started:
                assert not serving.done(), "the server stopped starting"
                await asyncio.sleep(0.02)
        workers = backend.registry.list_workers()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            made = await http.post("/thumbnails", json={"url": "https://x/cat.png",
                                                        "width": 640})
            assert made.status_code == 200, made.text
            later = await http.post("/thumbnails", params={"wait": 0},
                                    json={"url": "https://x/dog.png", "width": 100})
            looked = await http.get(f"/thumbnails/{made.json()['id']}")
            missing = await http.get("/thumbnails/not-an-id")
        server.should_exit = True
        await serving
        return [made, later, looked, missing], workers

    (made, later, looked, missing), workers = asyncio.run(scenario())
    assert made.json()["status"] == "completed"
    assert made.json()["result"] == {"url": "https://x/cat.png", "width": 160, "attempt": 1}
    assert later.status_code in (200, 202)  # 202 unless the worker was quicker than the look
    assert looked.json() == made.json()
    assert missing.status_code == 404
    assert len(workers) == 1  # the embedded worker, registered while the app served
    assert backend.registry.list_workers() == []  # and gone once the app stopped
    # The activity answered 202 was left to the worker, drained at shutdown or pending.
    status = backend.get_activity(later.json()["id"]).status
    assert status in (Status.COMPLETED, Status.PENDING)

"""A FastAPI app that enqueues with `await`, waits for the result, and runs a worker.

    pip install -e '.[dev-server]' fastapi uvicorn     # from a clone (not on PyPI yet)
    runnerq-mongo dev-server &                          # no MongoDB? this one, on 27017
    export RUNNERQ_MONGO_URI=mongodb://localhost:27017 RUNNERQ_QUEUE=thumbnails
    uvicorn fastapi_app:app --app-dir examples

    curl -X POST localhost:8000/thumbnails -H 'content-type: application/json' \\
         -d '{"url": "https://example.com/cat.png", "width": 640}'

The worker runs inside the app (started and stopped by its lifespan): its `async def`
handler runs on the app's event loop beside the requests. In production you would
more often run the workers apart (`runnerq-mongo worker --app ...`) and keep only
the enqueue here. docs/asyncio.md explains both halves; tests/test_examples.py runs
this file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse

from runnerq_cli import HandlerRegistry, InvalidArgument, NotFound
from runnerq_cli.aio import AsyncWorker, connect_async

registry = HandlerRegistry()


@registry.handler("thumbnail")
async def thumbnail(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    await asyncio.sleep(0.01)  # an awaited download, say: the loop serves requests meanwhile
    return {"url": payload["url"], "width": payload["width"] // 4, "attempt": ctx.attempt}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    queue = connect_async()  # RUNNERQ_MONGO_URI, RUNNERQ_QUEUE, ... (or arguments)
    async with queue, AsyncWorker(registry, backend=queue, concurrency=4):
        app.state.queue = queue
        yield  # on shutdown: the worker drains its running work, then stops


app = FastAPI(lifespan=lifespan)


@app.post("/thumbnails")
async def make_thumbnail(body: dict[str, Any], wait: float = 10.0) -> Any:
    """Enqueue, then wait (at most `wait` seconds) for the worker's result."""
    added = await app.state.queue.enqueue("thumbnail", body)
    outcome = await app.state.queue.wait(added.activity_id, timeout=wait)
    if outcome.timed_out:  # still to do: 202, and where to look later
        return JSONResponse({"id": str(added.activity_id), "status": outcome.last_status},
                            status_code=202)
    return {"id": str(added.activity_id), "status": outcome.status,
            "result": outcome.result.data if outcome.result else None}


@app.get("/thumbnails/{activity_id}")
async def get_thumbnail(activity_id: str) -> dict[str, Any]:
    try:
        activity = await app.state.queue.get_activity(activity_id)
    except (NotFound, InvalidArgument) as exc:  # no such activity, or not an id
        raise HTTPException(404, str(exc)) from None
    result = await app.state.queue.get_result(activity.id)
    return {"id": str(activity.id), "status": activity.status,
            "result": result.data if result else None}

"""``GET /v1/events``: the controller's events (committed, refused, model) as server-sent events.

The stream ends when the daemon starts draining, so a connected client never holds up a shutdown.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sanic import Blueprint, Request

from mlxd import json_out

bp = Blueprint("admin_events")

KEEPALIVE_S = 15.0


def frame(event: dict[str, Any]) -> str:
    """One SSE frame: ``id``, ``event`` (the type) and the event as JSON ``data``."""
    return f"id: {event['id']}\nevent: {event['type']}\ndata: {json_out.dumps(event, separators=None)}\n\n"


@bp.get("/v1/events", ctx_kind="read")
async def events(request: Request) -> None:
    host = request.app.ctx.host
    bus = host.controller.events
    response = await request.respond(content_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def relay() -> None:
        async for event in bus.subscribe():
            queue.put_nowait(event)

    relay_task = asyncio.get_running_loop().create_task(relay())
    await asyncio.sleep(0)  # let the relay subscribe before the client is told it is connected
    shutdown = asyncio.get_running_loop().create_task(host.shutdown.wait())
    try:
        await response.send(": connected\n\n")
        while not host.shutdown.is_set():
            getter = asyncio.get_running_loop().create_task(queue.get())
            done, _ = await asyncio.wait({getter, shutdown}, timeout=KEEPALIVE_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                await response.send(frame(getter.result()))
            else:
                getter.cancel()
                if not host.shutdown.is_set():
                    await response.send(": keep-alive\n\n")
        await response.eof()
    finally:
        relay_task.cancel()
        shutdown.cancel()

"""Server-sent events for the streaming routes: frame formats, keep-alive pings, errors and client disconnects.

A streaming route builds an async iterator of ready-made frames (``data(...)``, ``event(...)``) and hands it to
``stream``, which owns the response: it pings while the model is slow to produce the next frame, renders an error
raised mid-stream as one final frame (the status line is long gone by then), and calls ``on_disconnect`` (the
generation handle's ``cancel``) when the client goes away before the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterable, AsyncIterator, Callable

from sanic import Request

from mlxd.api import request_log
from mlxd.api.errors import dumps, translate

log = logging.getLogger("mlxd.api")

CONTENT_TYPE = "text/event-stream"
# b10621 tells proxies not to buffer a stream; no-cache keeps intermediaries from replaying one.
HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}
# A comment line: SSE clients ignore it, proxies and sockets see traffic.
PING = ": ping\n\n"
DONE = "data: [DONE]\n\n"


def data(payload: Any) -> str:
    """One ``data:`` frame; a list becomes one frame per item (b10621's ``format_oai_sse``)."""
    if isinstance(payload, list):
        return "".join(data(item) for item in payload)
    return f"data: {payload if isinstance(payload, str) else dumps(payload)}\n\n"


def event(name: str, payload: Any) -> str:
    """One named frame, ``event: NAME`` then ``data: JSON`` (Anthropic and Responses streams)."""
    return f"event: {name}\ndata: {payload if isinstance(payload, str) else dumps(payload)}\n\n"


def error_frame(exc: BaseException) -> str:
    """An error after the stream started, as b10621 sends it: ``data: {"error": {...}}``."""
    _, body = translate(exc)
    return data({"error": body})


def anthropic_error_frame(exc: BaseException) -> str:
    """An error in an Anthropic-shaped stream: ``event: error`` with the envelope as its data."""
    _, body = translate(exc)
    return event("error", {"type": "error", "error": {"type": body["type"], "message": body["message"]}})


def ping_interval(settings: Any) -> float | None:
    """``sse_ping_interval`` of a Config or of a request's options, in seconds; None when pings are off (-1, 0)."""
    seconds = getattr(settings, "sse_ping_interval", 30)
    return float(seconds) if seconds and seconds > 0 else None


async def stream(
    request: Request,
    frames: AsyncIterable[str],
    *,
    on_disconnect: Callable[[], Any] | None = None,
    ping: float | None = None,
    on_error: Callable[[BaseException], str] = error_frame,
    headers: dict[str, str] | None = None,
    open_now: bool = False,
) -> None:
    """Send ``frames`` as an SSE response; the route handler returns None after awaiting this.

    ``open_now`` sends the status and headers at once, before any frame: a stream that may stay silent for long
    (``/models/sse``) is then open for its client as soon as it is subscribed, as b10621's is.
    """
    request_log.streaming(request)
    response = await request.respond(content_type=CONTENT_TYPE, headers={**HEADERS, **(headers or {})})
    if open_now:
        await response.send(b"")  # sanic writes the headers alone; an empty first chunk does not end the stream
    iterator: AsyncIterator[str] = aiter(frames)
    loop = asyncio.get_running_loop()
    last_sent = loop.time()

    async def produce() -> None:
        # One task reads and sends every frame (a task per frame would cost more than rendering the frame).
        nonlocal last_sent
        while True:
            try:
                frame = await anext(iterator)
            except StopAsyncIteration:
                return
            except Exception as exc:  # the generation failed after the headers went out
                await response.send(on_error(exc))
                return
            if frame:
                await response.send(frame)
                last_sent = loop.time()

    producer = asyncio.ensure_future(produce())
    finished = False
    try:
        while True:
            # Ping once the model has been slow to produce the next frame for ``ping`` seconds.
            timeout = None if ping is None else max(0.0, last_sent + ping - loop.time())
            done, _ = await asyncio.wait({producer}, timeout=timeout)
            if done:
                producer.result()  # a failed send (the client went away) raises here
                break
            if ping is not None and loop.time() - last_sent >= ping:
                await response.send(PING)
                last_sent = loop.time()
        await response.eof()
        finished = True
    finally:
        if not producer.done():
            producer.cancel()
            with contextlib.suppress(BaseException):
                await producer
        request_log.stream_ended(request, response.status, finished)
        if not finished:
            log.info("client disconnected from %s %s; cancelling", request.method, request.path)
            if on_disconnect is not None:
                on_disconnect()
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()

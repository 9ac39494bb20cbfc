"""The SSE helper on a real socket: frames in order, pings while the producer is slow, an error as the last
frame, and a client that goes away cancelling the producer."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sanic import Request

from mlxd.api import sse
from mlxd.api.app import create_app
from mlxd.api.state import ServingState
from mlxd.config import Config
from mlxd.errors import ContextOverflow
from tests.e2e.api_harness import AppServer, served_model

cancelled = threading.Event()
closed = threading.Event()


async def frames(mode: str) -> AsyncIterator[str]:
    try:
        yield sse.data({"n": 1})
        if mode == "slow":
            await asyncio.sleep(0.5)
        elif mode == "error":
            raise ContextOverflow(10, 5)
        elif mode == "hang":
            await asyncio.sleep(120)
        yield sse.data([{"n": 2}, {"n": 3}])
        yield sse.event("done", {"ok": True})
        yield sse.DONE
    finally:
        closed.set()


async def stream_route(request: Request) -> None:
    mode = request.args.get("mode", "")
    await sse.stream(request, frames(mode), ping=0.05 if mode == "slow" else None, on_disconnect=cancelled.set)


@pytest.fixture(scope="module")
def sse_server(tiny_model: Any) -> Iterator[AppServer]:
    state = ServingState(config=Config())
    state.model = served_model(tiny_model, parallel=1)
    app = create_app(state, name="mlxd_sse_test")
    app.add_route(stream_route, "/test/stream", methods=["GET"])
    server = AppServer(state, app=app)
    yield server
    server.stop()
    state.model.worker.stop()


def test_frames_in_order(sse_server: AppServer) -> None:
    response = httpx.get(f"{sse_server.base_url}/test/stream", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.text == (
        'data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\nevent: done\ndata: {"ok":true}\n\ndata: [DONE]\n\n'
    )


def test_pings_while_the_producer_is_slow(sse_server: AppServer) -> None:
    text = httpx.get(f"{sse_server.base_url}/test/stream", params={"mode": "slow"}, timeout=30).text
    assert sse.PING in text
    data = [line for line in text.split("\n\n") if line.startswith("data:")]
    assert data[0] == 'data: {"n":1}' and data[-1] == "data: [DONE]"


def test_error_mid_stream_is_the_last_frame(sse_server: AppServer) -> None:
    text = httpx.get(f"{sse_server.base_url}/test/stream", params={"mode": "error"}, timeout=30).text
    first, last = [f for f in text.split("\n\n") if f]
    assert first == 'data: {"n":1}'
    error = json.loads(last.removeprefix("data: "))["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["code"] == 400 and error["n_prompt_tokens"] == 10 and error["n_ctx"] == 5


def test_disconnect_cancels(sse_server: AppServer) -> None:
    cancelled.clear()
    closed.clear()
    with httpx.Client(base_url=sse_server.base_url, timeout=30) as client:
        with client.stream("GET", "/test/stream", params={"mode": "hang"}) as response:
            first = next(response.iter_lines())
            assert first == 'data: {"n":1}'
    assert cancelled.wait(20), "the route did not notice the client leaving"
    assert closed.wait(20), "the frame producer was not closed"

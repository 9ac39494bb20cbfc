"""Resumable streams: ``X-Conversation-Id`` keeps a stream's bytes, ``GET /v1/stream`` replays and tails them,
``POST /v1/streams/lookup`` lists sessions, ``DELETE /v1/stream`` stops one; a lost connection does not cancel."""

from __future__ import annotations

import time
from typing import Any, Iterator

import httpx
import pytest

from mlxd.config import Config
from tests.e2e.api_harness import AppServer, serving_in_process
from tests.e2e.sse_frames import payloads

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "stream": True, "seed": 1}


@pytest.fixture(scope="module")
def app_server(tiny_model: Any) -> Iterator[AppServer]:
    with serving_in_process(tiny_model, parallel=1, ctx_size=int(tiny_model.n_ctx_train),
                            config=Config(parallel=1)) as server:
        yield server


@pytest.fixture
def client(app_server: AppServer) -> Iterator[httpx.Client]:
    with app_server.client() as c:
        yield c


def _wait_done(client: httpx.Client, conv: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = client.post("/v1/streams/lookup", json={"conversation_ids": [conv]}).json()[0]
        if info["is_done"]:
            return info
        time.sleep(0.02)
    raise AssertionError(f"session {conv} did not end")


def test_finished_stream_is_replayed_from_any_offset(client: httpx.Client) -> None:
    original = client.post("/v1/chat/completions", json=CHAT, headers={"X-Conversation-Id": "c1"}).content
    info = _wait_done(client, "c1")
    assert info["total_bytes"] == len(original) and info["completed_at"] >= info["started_at"] > 0
    assert client.get("/v1/stream", params={"conv_id": "c1", "from": 0}).content == original
    cut = original.index(b"\n\n") + 2
    assert client.get("/v1/stream", params={"conv_id": "c1", "from": cut}).content == original[cut:]
    assert client.post("/v1/streams/lookup", json={"conversation_ids": ["nope"]}).json() == []


def test_lost_connection_does_not_cancel_and_resume_completes(client: httpx.Client, app_server: AppServer) -> None:
    body = {"prompt": "Once upon a time", "n_predict": 400, "ignore_eos": True, "stream": True, "seed": 7}
    with app_server.client() as first:
        with first.stream("POST", "/completion", json=body, headers={"X-Conversation-Id": "c2"}) as response:
            chunks = response.iter_bytes()
            received = next(chunks)
    info = _wait_done(client, "c2")
    rest = client.get("/v1/stream", params={"conv_id": "c2", "from": len(received)}).content
    whole = payloads((received + rest).decode())
    assert whole[-1]["stop"] is True and whole[-1]["tokens_predicted"] == 400
    assert info["total_bytes"] == len(received) + len(rest)


def test_delete_stops_a_running_generation(client: httpx.Client, app_server: AppServer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_SLOTS_DEBUG", "1")  # the slot's text witnesses how far it ran
    body = {"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": True, "stream": True}
    with app_server.client() as first:
        with first.stream("POST", "/completion", json=body, headers={"X-Conversation-Id": "c3"}) as response:
            next(response.iter_bytes())
    assert client.delete("/v1/stream", params={"conv_id": "c3"}).status_code == 204
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and client.get("/slots").json()[0]["is_processing"]:
        time.sleep(0.02)
    slot = client.get("/slots").json()[0]
    assert not slot["is_processing"]
    assert slot["next_token"][0]["n_decoded"] == 0  # idle, as b10621 shows it
    written = len(client.post("/tokenize", json={"content": slot["generated"]}).json()["tokens"])
    assert 0 < written < app_server.state.model.worker.n_ctx_slot // 2
    assert client.get("/v1/stream", params={"conv_id": "c3"}).status_code == 404


@pytest.mark.parametrize("method,path,kwargs,status", [
    ("GET", "/v1/stream", {"params": {"conv_id": "missing"}}, 404),
    ("GET", "/v1/stream", {}, 400),
    ("GET", "/v1/stream", {"params": {"conv_id": "c1", "from": "x"}}, 400),
    ("GET", "/v1/stream", {"params": {"conv_id": "c1", "from": 10**9}}, 400),
    ("DELETE", "/v1/stream", {"params": {"conv_id": "missing"}}, 404),
    ("POST", "/v1/streams/lookup", {"json": {"conversation_ids": "c1"}}, 400),
    ("POST", "/v1/streams/lookup", {"content": b"{"}, 400),
])
def test_bad_resume_requests(client: httpx.Client, method: str, path: str, kwargs: dict, status: int) -> None:
    client.post("/v1/chat/completions", json=CHAT, headers={"X-Conversation-Id": "c1"})
    response = client.request(method, path, **kwargs)
    assert response.status_code == status
    assert response.json()["error"]["code"] == status

"""The non-generation routes against b10621's captures: status and recursive key set, plus each option's effect."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxd.api.state import ServingState
from mlxd.config import Config
from tests.e2e import captures
from tests.e2e.api_harness import AppServer, served_model


@pytest.fixture(scope="module")
def app_server(tiny_model: Any) -> Iterator[AppServer]:
    served = served_model(tiny_model)
    server = AppServer(ServingState(config=Config(metrics=True)), body_limit=64 * 1024)
    server.state.model = served
    yield server
    server.stop()
    served.worker.stop()


@pytest.fixture
def client(app_server: AppServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=app_server.base_url, timeout=30) as c:
        yield c


def replay(client: httpx.Client, capture: captures.Capture, **kwargs: Any) -> httpx.Response:
    headers = {k: v for k, v in capture.request_headers.items() if k == "content-type"}
    return client.request(capture.method, capture.path, content=capture.request_body or None, headers=headers,
                          **kwargs)


# Captures of routes this file covers whose status and key set mlxd reproduces.
SAME = [
    "get_health", "get_v1_health", "get_props", "get_slots_idle", "get_models", "get_v1_models",
    "get_lora_adapters", "get_root", "err_unknown_route", "err_unknown_route_post", "err_wrong_method_get_completion",
    "err_wrong_method_post_health", "err_tokenize_missing", "post_tokenize", "post_tokenize_add_special",
    "post_tokenize_special", "post_tokenize_with_pieces", "post_detokenize", "post_apply_template",
]


@pytest.mark.parametrize("name", SAME)
def test_capture_status_and_keys(client: httpx.Client, name: str) -> None:
    capture = captures.load(name)
    response = replay(client, capture)
    assert response.status_code == capture.status, response.text
    assert captures.key_set(response.json()) == captures.key_set(capture.json())


def test_options_preflight_matches_capture(client: httpx.Client) -> None:
    capture = captures.load("options_cors")
    response = replay(client, capture)
    assert response.status_code == 200
    assert response.content == b""
    for header in ("access-control-allow-origin", "access-control-allow-credentials",
                   "access-control-allow-methods", "access-control-allow-headers"):
        assert response.headers.get(header) == capture.headers[header]


def test_malformed_json_is_a_400_envelope(client: httpx.Client) -> None:
    # by_design: b10621 answers a JSON parse error with 500 server_error; mlxd with 400 invalid_request_error.
    capture = captures.load("err_malformed_json")
    response = client.post("/tokenize", content=capture.request_body)
    assert response.status_code == 400
    assert captures.key_set(response.json()) == captures.key_set(capture.json())
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_detokenize_wrong_type_is_a_400_envelope(client: httpx.Client) -> None:
    # by_design: b10621 answers 500 (its JSON library's type error); mlxd 400 with the field named.
    capture = captures.load("err_detokenize_bad")
    response = replay(client, capture)
    assert response.status_code == 400
    assert captures.key_set(response.json()) == captures.key_set(capture.json())
    assert "tokens" in response.json()["error"]["message"]


def test_tokenize_pieces_give_bytes_for_split_characters(client: httpx.Client) -> None:
    body = client.post("/tokenize", json={"content": "llama 🦙", "with_pieces": True}).json()
    pieces = body["tokens"]
    raw = b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in pieces)
    assert raw.decode() == "llama 🦙"
    assert any(isinstance(p["piece"], list) for p in pieces)
    ids = [p["id"] for p in pieces]
    assert client.post("/tokenize", json={"content": "llama 🦙"}).json()["tokens"] == ids
    assert client.post("/detokenize", json={"tokens": ids}).json()["content"] == "llama 🦙"


def test_tokenize_parse_special_switch(client: httpx.Client) -> None:
    text = "<|im_start|>user"
    parsed = client.post("/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]
    plain = client.post("/tokenize", json={"content": text, "parse_special": False}).json()["tokens"]
    assert parsed[0]["piece"] == "<|im_start|>"
    assert len(plain) > len(parsed)
    mixed = client.post("/tokenize", json={"content": [parsed[0]["id"], "user"]}).json()["tokens"]
    assert mixed == [p["id"] for p in parsed]


def test_apply_template_renders_the_generation_prompt(client: httpx.Client) -> None:
    prompt = client.post("/apply-template", json={"messages": [{"role": "user", "content": "hello"}]}).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n")
    assert "hello" in prompt
    missing = client.post("/apply-template", json={})
    assert missing.status_code == 400 and missing.json()["error"]["message"] == "'messages' is required"


def test_props_post_is_gated(app_server: AppServer, client: httpx.Client) -> None:
    refused = client.post("/props", json={})
    assert refused.status_code == 501
    assert "--props" in refused.json()["error"]["message"]
    with app_server.options(props=True):
        assert client.post("/props", json={}).json() == {"success": True}
        unknown = client.post("/props", json={"n_ctx": 4})
        assert unknown.status_code == 400 and "n_ctx" in unknown.json()["error"]["message"]
        assert client.get("/props").json()["endpoint_props"] is True


def test_slots_switches(app_server: AppServer, client: httpx.Client) -> None:
    slots = client.get("/slots", params={"fail_on_no_slot": 1})
    assert slots.status_code == 200 and len(slots.json()) == 2
    with app_server.options(slots=False):
        refused = client.get("/slots")
        assert refused.status_code == 501 and refused.json()["error"]["type"] == "not_supported_error"


def test_slot_actions(app_server: AppServer, client: httpx.Client, tmp_path: Path) -> None:
    refused = client.post("/slots/0", params={"action": "save"}, json={"filename": "a.bin"})
    assert refused.status_code == 501 and "--slot-save-path" in refused.json()["error"]["message"]
    with app_server.options(slot_save_path=str(tmp_path)):
        for path, params, body, message in [
            ("/slots/x", {"action": "save"}, {"filename": "a"}, "Invalid slot ID"),
            ("/slots/9", {"action": "save"}, {"filename": "a"}, "Invalid slot ID"),
            ("/slots/0", {"action": "fly"}, {"filename": "a"}, "Invalid action"),
            ("/slots/0", {"action": "save"}, {"filename": "../escape"}, "Invalid filename"),
            ("/slots/0", {"action": "save"}, {"filename": ".."}, "Invalid filename"),
            ("/slots/0", {"action": "restore"}, {"filename": "a\u0000b"}, "Invalid filename"),
        ]:
            response = client.post(path, params=params, json=body)
            assert response.status_code in (400, 501), response.text
            if response.status_code == 400:
                assert response.json()["error"]["message"] == message
        assert list(tmp_path.iterdir()) == []


def test_metrics_families(app_server: AppServer, client: httpx.Client) -> None:
    capture = captures.load("get_metrics_before")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "process-start-time-unix" in response.headers

    def families(text: str) -> list[str]:
        return [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]

    upstream = families(capture.body.decode())
    ours = families(response.text)
    assert ours[: len(upstream)] == upstream
    assert all(name.startswith("mlxd_") for name in ours[len(upstream):])
    assert 'mlxd_config_info{config_hash="' in response.text
    with app_server.options(metrics=False):
        assert client.get("/metrics").status_code == 501


def test_disabled_features_answer_403(client: httpx.Client) -> None:
    for method in ("GET", "POST"):
        for path in ("/tools", "/cors-proxy"):
            response = client.request(method, path)
            assert response.status_code == 403
            assert response.json() == {"error": {"message": "this feature is disabled", "type": "feature_disabled"}}


def test_lora_adapters_post_without_adapters(client: httpx.Client) -> None:
    assert client.post("/lora-adapters", json={"id": 0}).status_code == 400
    # b10621 ignores ids no adapter has (tests/e2e/test_lora.py covers loaded adapters).
    assert client.post("/lora-adapters", json=[{"id": 0, "scale": 1.0}]).json() == {"success": True}
    assert client.get("/lora-adapters").json() == []


def test_api_keys(app_server: AppServer, client: httpx.Client, tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# operators\nfile-key\n\n")
    with app_server.options(api_key=["cli-key", "other"], api_key_file=str(key_file)):
        assert client.get("/health").status_code == 200
        assert client.get("/v1/health").status_code == 200
        refused = client.get("/props")
        assert refused.status_code == 401
        assert refused.json() == {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}
        assert client.get("/props", headers={"Authorization": "Bearer cli-key"}).status_code == 200
        assert client.get("/props", headers={"Authorization": "Bearer other"}).status_code == 200
        assert client.get("/props", headers={"X-Api-Key": "file-key"}).status_code == 200
        assert client.get("/props", headers={"Authorization": "Bearer # operators"}).status_code == 401
        assert client.get("/props", headers={"Authorization": "Bearer cli-ke"}).status_code == 401
        assert client.options("/props").status_code == 200  # preflight before auth
        assert client.get("/no-such-route").status_code == 401


def test_cors_origins(app_server: AppServer, client: httpx.Client) -> None:
    # b10621's three cases (server-http.cpp's pre-routing handler): "*" with credentials echoes the Origin; any
    # other value but "localhost" is sent as configured, for the browser to compare.
    origin = {"Origin": "http://ui.example"}
    assert client.get("/health", headers=origin).headers["access-control-allow-origin"] == "http://ui.example"
    with app_server.options(cors_origins="http://other.example"):
        assert client.get("/health", headers=origin).headers["access-control-allow-origin"] == "http://other.example"
    with app_server.options(cors_credentials=False):
        assert client.get("/health", headers=origin).headers["access-control-allow-origin"] == "*"
        preflight = client.options("/completions", headers=origin)
        assert preflight.headers["access-control-allow-credentials"] == "false"


@pytest.mark.parametrize("origin", ["http://localhost", "http://localhost:8080", "https://127.0.0.1:3000",
                                    "http://[::1]", "http://[::1]:3000"])
def test_cors_origins_localhost_reflects_local_origins(app_server: AppServer, client: httpx.Client,
                                                       origin: str) -> None:
    with app_server.options(cors_origins="localhost"):
        preflight = client.options("/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == origin
        assert client.get("/health", headers={"Origin": origin}).headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize("origin", ["http://evil.example", "http://notlocalhost", "http://localhost.evil.example",
                                    "localhost", "http://[::1"])
def test_cors_origins_localhost_sends_no_header_to_others(app_server: AppServer, client: httpx.Client,
                                                          origin: str) -> None:
    with app_server.options(cors_origins="localhost"):
        preflight = client.options("/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
        assert preflight.status_code == 200
        assert "access-control-allow-origin" not in preflight.headers
        assert preflight.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
        assert "access-control-allow-origin" not in client.get("/health", headers={"Origin": origin}).headers


def test_api_prefix(tiny_model: Any, app_server: AppServer) -> None:
    state = ServingState(config=Config(api_prefix="/llm/"))
    state.model = app_server.state.model
    prefixed = AppServer(state)
    try:
        with httpx.Client(base_url=prefixed.base_url, timeout=30) as c:
            assert c.get("/llm/health").json() == {"status": "ok"}
            assert c.get("/health").status_code == 404
            assert c.post("/llm/tokenize", json={"content": "a"}).status_code == 200
    finally:
        prefixed.stop()


def test_loading_gate(app_server: AppServer) -> None:
    state = ServingState(config=Config())
    loading = AppServer(state)
    try:
        with httpx.Client(base_url=loading.base_url, timeout=30) as c:
            for path in ("/health", "/props", "/no-such-route"):
                response = c.get(path)
                assert response.status_code == 503
                assert response.json() == {"error": {"message": "Loading model", "type": "unavailable_error",
                                                     "code": 503}}
            assert c.options("/health").status_code == 200
            state.model = app_server.state.model
            assert c.get("/health").status_code == 200
    finally:
        loading.stop()


def test_body_limit_is_a_413_envelope(client: httpx.Client) -> None:
    response = client.post("/tokenize", content=b'{"content": "' + b"a" * 100_000 + b'"}')
    assert response.status_code == 413
    body = response.json()["error"]
    assert body["code"] == 413 and body["type"] == "invalid_request_error"
    assert client.get("/health").status_code == 200


def test_error_bodies_are_json(client: httpx.Client) -> None:
    response = client.post("/detokenize", json={"tokens": [10**9]})
    assert response.status_code == 400
    assert json.loads(response.text)["error"]["type"] == "invalid_request_error"


def test_paths_match_exactly(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    assert client.get("/health/").status_code == 404
    assert client.get("/HEALTH").status_code == 404


def test_vertex_routes_are_not_mounted_without_aip_mode(client: httpx.Client) -> None:
    # b10621 mounts these only under AIP_MODE=PREDICTION (tests/e2e/test_upstream_behaviours.py runs them).
    response = client.post("/predict", json={"instances": []})
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_slots_after_a_task_and_debug_redaction(app_server: AppServer, client: httpx.Client,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from mlxd.engine.sampling.params import SamplingParams
    from mlxd.engine.types import FinalEvent, GenerationRequest

    model = app_server.state.model
    tokens = client.post("/tokenize", json={"content": "Once upon a time"}).json()["tokens"]
    handle = model.worker.submit(GenerationRequest(prompt_tokens=tokens, sampling=SamplingParams(temperature=0.0),
                                                   n_predict=4))
    assert isinstance(handle.result(), FinalEvent)

    capture = captures.load("get_slots_after")
    entries = client.get("/slots").json()
    used = [e for e in entries if "id_task" in e]
    assert used, entries
    upstream_keys = {k for k in captures.key_set(capture.json()) if not k.startswith("[].params.")}
    ours = {k for k in captures.key_set(used) if not k.startswith("[].params.")}
    assert ours == upstream_keys
    assert all("prompt" not in e and "generated" not in e for e in entries)

    monkeypatch.setenv("LLAMA_SERVER_SLOTS_DEBUG", "1")
    debug = [e for e in client.get("/slots").json() if "id_task" in e]
    assert "Once upon a time" in debug[0]["prompt"]
    assert "generated" in debug[0]


def test_metrics_count_a_reported_generation(app_server: AppServer, client: httpx.Client) -> None:
    from mlxd.engine.sampling.params import SamplingParams
    from mlxd.engine.types import FinalEvent, GenerationRequest

    def scrape() -> dict[str, float]:
        lines = client.get("/metrics").text.splitlines()
        return {line.split()[0]: float(line.split()[1]) for line in lines if line.startswith("llamacpp:")}

    before = scrape()
    model = app_server.state.model
    handle = model.worker.submit(GenerationRequest(prompt_tokens=[1, 2, 3, 4, 5],
                                                   sampling=SamplingParams(temperature=0.0), n_predict=3,
                                                   cache_prompt=False))
    final = handle.result()
    assert isinstance(final, FinalEvent)
    app_server.state.metrics.on_request("completion")
    app_server.state.metrics.on_final(final)  # what a generation route reports when a request ends
    after = scrape()
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == len(final.tokens)
    assert after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] == final.timings.prompt_n
    assert after["llamacpp:n_tokens_max"] >= final.n_prompt_tokens + len(final.tokens)
    assert after["llamacpp:requests_processing"] == 0
    assert 'mlxd_requests_total{route="completion"}' in client.get("/metrics").text


def test_timeout_closes_a_stalled_request(app_server: AppServer) -> None:
    import socket

    state = ServingState(config=Config(timeout=1))
    state.model = app_server.state.model
    stalled = AppServer(state)
    try:
        host, port = stalled.base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the headers never end
            sock.settimeout(30)
            received = b""
            while chunk := sock.recv(4096):
                received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408")
        assert json.loads(body)["error"] == {"code": 408, "message": "Request Timeout",
                                             "type": "invalid_request_error"}
    finally:
        stalled.stop()

"""Bad input to the generation routes: malformed, truncated, oversized and wrongly typed bodies always get an envelope
with a 4xx status (or 200 for input that happens to be valid, 501 for a feature that is off), never a 500, and the
server goes on serving."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.api_harness import AppServer, serving_in_process

HELLO = [{"role": "user", "content": "hi"}]
# Each route with a valid body that generates at most two tokens.
ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/completion", {"prompt": "Once", "n_predict": 2}),
    ("/v1/completions", {"prompt": "Once", "max_tokens": 2}),
    ("/v1/chat/completions", {"messages": HELLO, "max_tokens": 2}),
    ("/chat/completions/input_tokens", {"messages": HELLO}),
    ("/v1/messages", {"model": "m", "max_tokens": 2, "messages": HELLO}),
    ("/v1/messages/count_tokens", {"model": "m", "messages": HELLO}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": 2}),
    ("/embedding", {"content": "a"}),
    ("/rerank", {"query": "a", "documents": ["b"]}),
    ("/v1/streams/lookup", {"conversation_ids": ["a"]}),
    ("/v1/chat/completions/control", {"id": "chatcmpl-a", "action": "reasoning_end"}),
]
CORPUS: list[bytes] = [
    b"", b"{", b'{"prompt": "Once"', b"[]", b"null", b"42", b'"text"', b"\xff\xfe\x00", b"[" * 5000 + b"]" * 5000,
    b'{"prompt": NaN}', b'{"n_predict": 1e999}', b'{"prompt": ' + b"9" * 5000 + b"}", b"{" * 3000,
]
WRONG_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
    st.lists(st.integers(min_value=-5, max_value=2**40), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
FIELDS = ["prompt", "messages", "n_predict", "max_tokens", "stream", "temperature", "top_k", "n_probs", "n", "seed",
          "stop", "logit_bias", "samplers", "response_fields", "lora", "id_slot", "stream_options", "tools",
          "tool_choice", "logprobs", "top_logprobs", "input", "system", "content", "role", "input_extra",
          "chat_template_kwargs", "reasoning_format", "dry_sequence_breakers", "t_max_predict_ms", "n_indent",
          "grammar", "json_schema", "response_format", "grammar_triggers", "conversation_ids"]


@pytest.fixture(scope="module")
def app_server(tiny_model: Any) -> Iterator[AppServer]:
    with serving_in_process(tiny_model, ctx_size=512) as server:
        yield server


@pytest.fixture(scope="module")
def client(app_server: AppServer) -> Iterator[httpx.Client]:
    with app_server.client() as c:
        yield c


def _check(response: httpx.Response) -> None:
    assert response.status_code < 500 or response.status_code == 501, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["code"] == response.status_code and isinstance(error["message"], str)
        assert "Traceback" not in error["message"]


@pytest.mark.parametrize("path", [path for path, _ in ROUTES])
@pytest.mark.parametrize("raw", CORPUS)
def test_malformed_bodies(client: httpx.Client, path: str, raw: bytes) -> None:
    _check(client.post(path, content=raw, headers={"Content-Type": "application/json"}))


@pytest.mark.parametrize("path,body", ROUTES)
def test_truncated_bodies(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    for cut in range(1, len(raw), max(1, len(raw) // 8)):
        _check(client.post(path, content=raw[:cut], headers={"Content-Type": "application/json"}))


@pytest.mark.parametrize("path,body", ROUTES)
def test_oversized_prompt(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    big = "Once upon a time " * 20000
    oversized = {**body, **{k: big for k in ("prompt", "input", "input_prefix", "content") if k in body}}
    if "messages" in body:
        oversized["messages"] = [{"role": "user", "content": big}]
    response = client.post(path, json=oversized)
    _check(response)
    if path.startswith(("/completion", "/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/responses",
                        "/infill")) and not path.endswith(("count_tokens", "control")):
        assert response.status_code == 400


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(ROUTES), field=st.sampled_from(FIELDS), value=WRONG_VALUES)
def test_wrongly_typed_fields(client: httpx.Client, route: tuple[str, dict[str, Any]], field: str,
                              value: Any) -> None:
    path, body = route
    mutated = {**body, field: value}
    if field in ("n_predict", "max_tokens") and value is None:
        mutated[field] = 2  # null is "the server default", which is an unbounded generation
    _check(client.post(path, json=mutated))


def test_server_still_serves(client: httpx.Client) -> None:
    assert client.post("/completion", json={"prompt": "Once", "n_predict": 2}).status_code == 200
    assert client.get("/health").status_code == 200

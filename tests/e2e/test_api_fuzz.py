"""Bad input to the JSON routes: always a 4xx envelope (or a 200 for input that happens to be valid, or 501 for a
feature that is off), never a 500, and the server goes on serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlxd.api.state import ServingState
from mlxd.config import Config
from tests.e2e.api_harness import AppServer, served_model

ROUTES = [
    ("/tokenize", {}),
    ("/detokenize", {}),
    ("/apply-template", {}),
    ("/props", {}),
    ("/slots/0", {"action": "save"}),
    ("/slots/0", {"action": "restore"}),
    ("/slots/1", {"action": "erase"}),
    ("/lora-adapters", {}),
]

CORPUS: list[bytes] = [
    b"",
    b"{",
    b'{"content": "a"',
    b"[]",
    b"null",
    b"42",
    b'"text"',
    b"\xff\xfe\x00",
    b"[" * 5000 + b"]" * 5000,
    b'{"content": NaN}',
    b'{"content": 1e999}',
    b'{"content": ' + b"9" * 5000 + b"}",
    b'{"content": {"nested": true}}',
    b'{"content": [1.5, null]}',
    b'{"content": "x", "with_pieces": "yes"}',
    b'{"content": "x", "add_special": 1}',
    b'{"tokens": "abc"}',
    b'{"tokens": [-1]}',
    b'{"tokens": [1e20]}',
    b'{"tokens": [true]}',
    b'{"messages": "hello"}',
    b'{"messages": [42]}',
    b'{"messages": [{"role": 5, "content": []}]}',
    b'{"messages": [{"role": "user", "content": {"a": 1}}]}',
    b'{"messages": [], "chat_template_kwargs": 3}',
    b'{"messages": [{"role": "user", "content": "hi"}], "tools": "x"}',
    b'{"filename": 7}',
    b'{"filename": "../../etc/passwd"}',
    b'{"filename": "/abs"}',
    b'{"filename": ""}',
    b'{"filename": "a\\u0000b"}',
    b'{"id": 0}',
    b'[{"id": "x"}]',
    json.dumps({"content": "\ud800"}).encode(),
]


@pytest.fixture(scope="module")
def fuzz_server(tiny_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    served = served_model(tiny_model)
    slot_dir = tmp_path_factory.mktemp("slots")
    config = Config(props=True, slot_save_path=str(slot_dir))
    server = AppServer(ServingState(config=config), body_limit=256 * 1024)
    server.state.model = served
    yield server
    server.stop()
    served.worker.stop()
    assert all(p.parent == slot_dir for p in slot_dir.rglob("*"))


def check(client: httpx.Client, path: str, params: dict[str, str], body: bytes) -> None:
    response = client.post(path, params=params, content=body, headers={"Content-Type": "application/json"})
    payload = response.json()
    # 501 is how b10621 (and mlxd) say a feature is off; any other 5xx is a failure to handle the input.
    refused_feature = response.status_code == 501 and payload["error"]["type"] == "not_supported_error"
    assert response.status_code < 500 or refused_feature, (path, body[:80], response.text)
    if response.status_code >= 400:
        error = payload["error"]
        assert error["code"] == response.status_code
        assert isinstance(error["message"], str) and "Traceback" not in error["message"]
        assert error["type"].endswith("_error")


@pytest.mark.parametrize("path,params", ROUTES)
def test_fixed_corpus(fuzz_server: AppServer, path: str, params: dict[str, str]) -> None:
    with httpx.Client(base_url=fuzz_server.base_url, timeout=30) as client:
        for body in CORPUS:
            check(client, path, params, body)
        assert client.get("/health").status_code == 200


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(["content", "tokens", "messages", "with_pieces", "add_special", "parse_special",
                               "filename", "tools", "chat_template_kwargs", "role"])
bodies = st.dictionaries(field_names, json_values, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(ROUTES), body=bodies | json_values, cut=st.integers(min_value=0, max_value=3))
def test_generated_bodies(fuzz_server: AppServer, route: tuple[str, dict[str, str]], body: Any, cut: int) -> None:
    raw = json.dumps(body).encode()
    if cut:
        raw = raw[: max(0, len(raw) - cut)]  # truncated documents too
    with httpx.Client(base_url=fuzz_server.base_url, timeout=30) as client:
        check(client, route[0], route[1], raw)


def test_oversized_body_then_serving(fuzz_server: AppServer) -> None:
    with httpx.Client(base_url=fuzz_server.base_url, timeout=30) as client:
        response = client.post("/tokenize", content=b'{"content": "' + b"x" * (300 * 1024) + b'"}')
        assert response.status_code == 413
        assert client.post("/tokenize", json={"content": "still here"}).status_code == 200


def test_slot_files_stay_inside(fuzz_server: AppServer) -> None:
    directory = Path(fuzz_server.state.config.slot_save_path)
    with httpx.Client(base_url=fuzz_server.base_url, timeout=30) as client:
        for name in ("../x", "a/b", "..", ".", " lead", "trail.", "c:d", "e\\f"):
            response = client.post("/slots/0", params={"action": "save"}, json={"filename": name})
            assert response.status_code in (400, 501), name
    assert not any(directory.parent.glob("x"))

"""Each family's tool-call format through one real mlxd-server in router mode: every model is the tiny synthetic
checkpoint served with that family's real template (tests/fixtures/templates), so the format is detected from the
template; ``tool_choice: "required"`` makes the grammar force the random-weight model to write a call in the
format, and the call comes back parsed, whole and streamed, in OpenAI's shape: streamed as llama-server streams
it, a first chunk with the call's index, id, type, name and ``{``, then chunks of argument pieces only, which add
up to the whole response's arguments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningServer
from tests.e2e.sse_frames import payloads

CORPUS = Path(__file__).parents[1] / "fixtures" / "templates"
# format -> the corpus template of a model that writes it
FAMILIES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct",
    "qwen3-coder": "Qwen3-Coder",
    "mistral": "unsloth-mistral-Devstral-Small-2507",
    "mistral-v3": "mistralai-Mistral-Nemo-Instruct-2407",
    "deepseek-r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-v3.1": "deepseek-ai-DeepSeek-V3.1",
    "deepseek-v3.2": "deepseek-ai-DeepSeek-V3.2",
    "glm": "GLM-4.7-Flash",
    "kimi-k2": "Kimi-K2-Instruct",
    "minimax-m2": "MiniMax-M2",
    "seed-oss": "ByteDance-Seed-OSS",
    "command-r7b": "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
    "granite": "ibm-granite-granite-3.3-2B-Instruct",
    "nemotron-v2": "NVIDIA-Nemotron-Nano-v2",
    "apertus": "Apertus-8B-Instruct",
    "lfm2": "LFM2.5-8B-A1B",
    "gemma4": "google-gemma-4-31B-it",
    "functionary-v3.1": "meetkai-functionary-medium-v3.1",
    "functionary-v3.2": "meetkai-functionary-medium-v3.2",
    "llama3": "meta-llama-Llama-3.1-8B-Instruct",
    "gpt-oss": "openai-gpt-oss-120b",
    "minimax-m1": "MiniMax-M1",
    "apriel": "Apriel-1.6-15b-Thinker-fixed",
    "solar-open": "upstage-Solar-Open-100B",
    "hy3": "tencent-Hy3",
    "minicpm5": "openbmb-MiniCPM5-1B",
    "kimi-k3": "Kimi-K3",
    "minimax-m3": "MiniMax-M3",
}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    # Bounded, so that the random-weight model cannot spend the token budget inside one value.
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                   "days": {"type": "integer", "minimum": 1, "maximum": 9}},
                   "required": ["city", "days"]}}}]


@pytest.fixture(scope="module")
def router(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    from tests.e2e.conftest import launch

    root = tmp_path_factory.mktemp("formats")
    sections = "".join(f"[{fmt}]\nmodel = {tiny_checkpoint}\nchat-template-file = {CORPUS / name}.jinja\n\n"
                       for fmt, name in FAMILIES.items())
    (root / "presets.ini").write_text("[*]\nctx-size = 4096\n\n" + sections)
    (root / "store").mkdir()
    running = launch(["--models-preset", str(root / "presets.ini"), "--models-max", "2", "--model-store-root",
                      str(root / "store"), "--host", "127.0.0.1", "--port", "0"], root / "mlxd.log")
    yield running
    running.stop(timeout=30)


def check_call(call: dict[str, Any], fmt: str) -> None:
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    # Kimi K2 writes its calls' ids (functions.NAME:INDEX), which llama-server keeps; the others get 32 characters.
    assert call["id"] == "functions.get_weather:0" if fmt == "kimi-k2" else len(call["id"]) == 32
    arguments = json.loads(call["function"]["arguments"])
    assert set(arguments) == {"city", "days"}
    assert isinstance(arguments["city"], str)
    assert isinstance(arguments["days"], int)


@pytest.mark.parametrize("fmt", sorted(FAMILIES))
def test_forced_call_whole_and_streamed(router: RunningServer, fmt: str) -> None:
    body = {"model": fmt, "messages": [{"role": "user", "content": "Weather in Paris for 3 days?"}], "tools": TOOLS,
            "tool_choice": "required", "max_tokens": 300, "seed": 3}
    with router.client(timeout=120) as client:
        whole = client.post("/v1/chat/completions", json=body)
        assert whole.status_code == 200, whole.text
        choice = whole.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        assert choice["message"]["content"] is None
        (call,) = choice["message"]["tool_calls"]
        check_call(call, fmt)

        streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
        assert streamed.status_code == 200, streamed.text
    chunks = [c for c in payloads(streamed.text) if c.get("choices")]
    pieces = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert pieces and all(p["index"] == 0 for p in pieces)
    assert "content" not in "".join(json.dumps(c["choices"][0]["delta"]) for c in chunks if c["choices"][0]["delta"]
                                    .get("content"))
    first, *rest = pieces
    assert set(first) == {"index", "id", "type", "function"} and set(first["function"]) == {"name", "arguments"}
    assert first["function"]["arguments"] == "{" and len(rest) > 2
    for piece in rest:  # llama-server's later chunks: the index and an arguments piece, nothing else
        assert set(piece) == {"index", "function"} and set(piece["function"]) == {"arguments"}
        assert piece["function"]["arguments"]
    assembled = {"id": first["id"], "type": first["type"], "function": {
        "name": first["function"]["name"], "arguments": "".join(p["function"]["arguments"] for p in pieces)}}
    check_call(assembled, fmt)
    # The same seed, the same forced text: the streamed call is the whole one (ids aside).
    assert assembled["function"] == call["function"]
    assert chunks[-1]["choices"][0] == {"finish_reason": "tool_calls", "index": 0, "delta": {}}


@pytest.mark.parametrize("fmt", ["hermes", "qwen3-coder", "mistral", "gpt-oss"])
def test_anthropic_and_responses_streams_carry_the_pieces(router: RunningServer, fmt: str) -> None:
    """The same pieces as Anthropic ``input_json_delta`` events and Responses ``function_call_arguments.delta``
    events: joined, they are the whole call's arguments."""
    base = {"model": fmt, "max_tokens": 300, "seed": 3}
    ask = [{"role": "user", "content": "Weather in Paris for 3 days?"}]
    anthropic = {**base, "messages": ask, "tool_choice": {"type": "any"},
                 "tools": [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]}
    responses = {**base, "input": ask, "tool_choice": "required",
                 "tools": [{"type": "function", **t["function"]} for t in TOOLS]}
    with router.client(timeout=120) as client:
        whole_message = client.post("/v1/messages", json=anthropic).json()
        streamed_message = client.post("/v1/messages", json={**anthropic, "stream": True})
        whole_response = client.post("/v1/responses", json=responses).json()
        streamed_response = client.post("/v1/responses", json={**responses, "stream": True})
    assert streamed_message.status_code == 200 and streamed_response.status_code == 200
    (use,) = [block for block in whole_message["content"] if block["type"] == "tool_use"]
    events = payloads(streamed_message.text)
    (start,) = [e for e in events if e.get("type") == "content_block_start"
                and e["content_block"]["type"] == "tool_use"]
    assert start["content_block"]["name"] == "get_weather" and set(start["content_block"]) == {"type", "id", "name"}
    json_pieces = [e["delta"]["partial_json"] for e in events if e.get("type") == "content_block_delta"
                   and e["delta"]["type"] == "input_json_delta"]
    assert len(json_pieces) > 2 and json.loads("".join(json_pieces)) == use["input"]
    (item,) = [i for i in whole_response["output"] if i["type"] == "function_call"]
    assert item["id"].startswith("fc_") and item["call_id"] == "call_" + item["id"].removeprefix("fc_")
    deltas = [e["delta"] for e in payloads(streamed_response.text)
              if e.get("type") == "response.function_call_arguments.delta"]
    assert len(deltas) > 2 and "".join(deltas) == item["arguments"]

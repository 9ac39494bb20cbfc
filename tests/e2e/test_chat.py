"""The OpenAI chat routes, Anthropic Messages and OpenAI Responses, served over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest

from tests.e2e.api_harness import AppServer, serving_in_process
from tests.e2e.captures import key_set, load
from tests.e2e.sse_frames import frames, payloads

HELLO = [{"role": "user", "content": "hello"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@pytest.fixture(scope="module")
def app_server(tiny_model: Any) -> Iterator[AppServer]:
    with serving_in_process(tiny_model, ctx_size=1024) as server:
        yield server


@pytest.fixture(scope="module")
def client(app_server: AppServer) -> Iterator[httpx.Client]:
    with app_server.client() as c:
        yield c


def test_chat_stream_deltas_equal_whole_answer(client: httpx.Client) -> None:
    body = {"messages": HELLO, "max_tokens": 16, "temperature": 0.9, "seed": 77}
    whole = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    streamed = payloads(client.post("/v1/chat/completions", json={**body, "stream": True}).text)
    assert streamed[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    text = "".join(p["choices"][0]["delta"].get("content") or "" for p in streamed if p["choices"])
    assert text == whole and whole


def test_chat_stream_logprobs(client: httpx.Client) -> None:
    body = {"messages": HELLO, "max_tokens": 3, "temperature": 0, "stream": True, "logprobs": True, "top_logprobs": 2}
    chunks = payloads(client.post("/chat/completions", json=body).text)
    with_probs = [c for c in chunks if c["choices"] and "logprobs" in c["choices"][0]]
    assert with_probs and len(with_probs[0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 2
    whole = client.post("/chat/completions", json={**body, "stream": False}).json()
    assert key_set(whole) == key_set(load("post_chat_completions_logprobs").json())


def test_top_logprobs_without_logprobs_is_refused(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json={"messages": HELLO, "top_logprobs": 2})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "top_logprobs requires logprobs to be set to true"


def test_chat_with_tools_is_served(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json={"messages": HELLO, "tools": TOOLS, "max_tokens": 4})
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["role"] == "assistant"
    refused = client.post("/v1/chat/completions", json={"messages": HELLO, "tools": TOOLS, "max_tokens": 4,
                                                        "stream": True, "logprobs": True})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "logprobs is not supported with tools + stream"


@pytest.mark.parametrize("part,message", [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, "image input is not supported"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "audio input is not supported"),
])
def test_media_parts_are_refused_as_b10621_refuses_them(client: httpx.Client, part: dict, message: str) -> None:
    """A text checkpoint has no tower for them: b10621's 500 server_error (measured against llama-server)."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this"}, part]}]
    response = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["message"].startswith(message)


CITY_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"],
                   "additionalProperties": False}}}]
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
                 "additionalProperties": False}


def test_response_format_constrains_the_answer(client: httpx.Client) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER_SCHEMA}}
    for seed in (1, 2):
        out = client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 40, "seed": seed,
                                                        "response_format": fmt}).json()
        assert json.loads(out["choices"][0]["message"]["content"])["answer"] in ("yes", "no")
    bad = client.post("/v1/chat/completions", json={"messages": HELLO, "response_format": {"type": "yaml"}})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == (
        'response_format type must be one of "text" or "json_object", but got: yaml')


def test_required_tool_choice_returns_parsed_tool_calls(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "weather?"}], "tools": CITY_TOOLS, "tool_choice": "required",
            "max_tokens": 60, "seed": 4}
    whole = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert whole["finish_reason"] == "tool_calls", whole
    call = whole["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "Rome")
    chunks = payloads(client.post("/v1/chat/completions", json={**body, "stream": True}).text)
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
             if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert calls[0]["function"]["name"] == "get_weather"
    arguments = "".join(c["function"].get("arguments", "") for c in calls)  # as an OpenAI client accumulates
    assert json.loads(arguments) == json.loads(call["function"]["arguments"])
    assert len(calls[0]["id"]) == 32 and all("id" not in c for c in calls[1:])
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


def test_anthropic_forced_tool_use(client: httpx.Client) -> None:
    tools = [{"name": "get_weather", "description": "w", "input_schema": CITY_TOOLS[0]["function"]["parameters"]}]
    body = {"model": "m", "max_tokens": 60, "messages": [{"role": "user", "content": "weather?"}], "tools": tools,
            "tool_choice": {"type": "tool", "name": "get_weather"}, "seed": 4}
    out = client.post("/v1/messages", json=body).json()
    assert out["stop_reason"] == "tool_use"
    use = [b for b in out["content"] if b["type"] == "tool_use"][0]
    assert use["name"] == "get_weather" and use["input"]["city"] in ("Paris", "Rome")
    events = frames(client.post("/v1/messages", json={**body, "stream": True}).text)
    starts = [json.loads(d)["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert "tool_use" in starts


def test_input_tokens_count_the_rendered_prompt(client: httpx.Client) -> None:
    chat = client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 1}).json()
    counted = client.post("/v1/chat/completions/input_tokens", json={"messages": HELLO}).json()
    assert counted == {"input_tokens": chat["usage"]["prompt_tokens"]}
    anthropic = client.post("/v1/messages/count_tokens", json={"model": "m", "messages": HELLO}).json()
    assert anthropic == counted
    responses = client.post("/v1/responses/input_tokens", json={"input": "hello"}).json()
    assert responses == {"object": "response.input_tokens", "input_tokens": counted["input_tokens"]}


# ---- Anthropic ---------------------------------------------------------------------------------------------------


def test_anthropic_message(client: httpx.Client) -> None:
    out = client.post("/v1/messages", json={"model": "m", "max_tokens": 4, "system": "be brief",
                                            "messages": HELLO}).json()
    assert set(out) == {"id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"}
    assert out["type"] == "message" and out["stop_reason"] == "max_tokens"
    assert out["content"][0]["type"] == "text" and out["usage"]["output_tokens"] == 4


def test_anthropic_stream_event_sequence(client: httpx.Client) -> None:
    body = {"model": "m", "max_tokens": 6, "messages": HELLO, "stream": True, "temperature": 0.7, "seed": 5}
    events = frames(client.post("/v1/messages", json=body).text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    for name, data in events:
        assert json.loads(data)["type"] == name
    text = "".join(json.loads(d)["delta"]["text"] for n, d in events if n == "content_block_delta")
    whole = client.post("/v1/messages", json={**body, "stream": False}).json()
    assert text == whole["content"][0]["text"]


def test_anthropic_tool_history_and_bad_blocks(client: httpx.Client) -> None:
    messages = [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
    ]
    tools = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}]
    ok = client.post("/v1/messages", json={"model": "m", "max_tokens": 2, "messages": messages, "tools": tools})
    assert ok.status_code == 200, ok.text
    bad = client.post("/v1/messages", json={"model": "m", "max_tokens": 2,
                                            "messages": [{"role": "user", "content": [{"type": "hologram"}]}]})
    assert bad.status_code == 400
    image = client.post("/v1/messages", json={"model": "m", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA"}}]}]})
    assert image.status_code == 500 and image.json()["error"]["type"] == "server_error"


# ---- Responses ---------------------------------------------------------------------------------------------------


def test_responses_whole_and_streamed(client: httpx.Client) -> None:
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
            "instructions": "be brief", "max_output_tokens": 6, "temperature": 0.7, "seed": 9}
    whole = client.post("/v1/responses", json=body).json()
    assert whole["object"] == "response" and whole["status"] == "completed"
    assert whole["output"][0]["type"] == "message"
    text = whole["output"][0]["content"][0]["text"]
    events = frames(client.post("/responses", json={**body, "stream": True}).text)
    names = [name for name, _ in events]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert names[-1] == "response.completed"
    deltas = "".join(json.loads(d)["delta"] for n, d in events if n == "response.output_text.delta")
    assert deltas == text
    completed = json.loads(events[-1][1])["response"]
    assert completed["output"][0]["content"][0]["text"] == text


def test_responses_refuses_what_it_cannot_honour(client: httpx.Client) -> None:
    stored = client.post("/v1/responses", json={"input": "hi", "previous_response_id": "resp_1"})
    assert stored.status_code == 400
    shaped = client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 40, "seed": 3, "text": {
        "format": {"type": "json_schema", "name": "a", "schema": ANSWER_SCHEMA}}}).json()
    assert json.loads(shaped["output"][0]["content"][0]["text"])["answer"] in ("yes", "no")


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions", "/audio/transcriptions"])
def test_transcriptions_need_an_audio_model(client: httpx.Client, path: str) -> None:
    response = client.post(path, files={"file": ("a.wav", b"RIFF0000WAVE", "audio/wav")}, data={"model": "m"})
    assert response.status_code == 501
    assert response.json()["error"] == {"code": 501, "message": "The current model does not support audio input.",
                                        "type": "not_supported_error"}


def test_reasoning_format_per_request(client: httpx.Client) -> None:
    ok = client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2, "reasoning_format": "none"})
    assert ok.status_code == 200
    bad = client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2, "reasoning_format": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "Unknown reasoning format: x"


# The random model is made to think, then answer, by a grammar: the reasoning split is then exact.
THINKING = 'root ::= "<think>\\nplan it\\n</think>\\n\\nyes"'


def test_reasoning_content_in_every_shape(client: httpx.Client) -> None:
    body = {"messages": HELLO, "max_tokens": 30, "grammar": THINKING}
    message = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("plan it", "yes")
    chunks = payloads(client.post("/v1/chat/completions", json={**body, "stream": True}).text)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "plan it"
    assert "".join(d.get("content") or "" for d in deltas) == "yes"
    none = client.post("/v1/chat/completions", json={**body, "reasoning_format": "none"}).json()
    assert none["choices"][0]["message"]["content"].startswith("<think>")

    anthropic = {"model": "m", "max_tokens": 30, "messages": HELLO, "grammar": THINKING}
    out = client.post("/v1/messages", json=anthropic).json()
    assert [(b["type"], b.get("thinking", b.get("text"))) for b in out["content"]] == [("thinking", "plan it"),
                                                                                      ("text", "yes")]
    events = frames(client.post("/v1/messages", json={**anthropic, "stream": True}).text)
    kinds = [json.loads(d).get("delta", {}).get("type") for n, d in events if n == "content_block_delta"]
    assert kinds[0] == "thinking_delta" and "signature_delta" in kinds and "text_delta" in kinds

    response = client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 30, "grammar": THINKING}).json()
    assert [i["type"] for i in response["output"]] == ["reasoning", "message"]
    assert response["output"][0]["content"][0]["text"] == "plan it"


def test_continue_final_message(client: httpx.Client) -> None:
    messages = HELLO + [{"role": "assistant", "content": "Once upon"}]
    body = {"messages": messages, "max_tokens": 1, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": False}}
    # --prefill-assistant continues a final assistant message; vLLM's explicit form gives the same prompt.
    prefilled = client.post("/apply-template", json=body).json()["prompt"]
    explicit = client.post("/apply-template", json={**body, "continue_final_message": True,
                                                     "add_generation_prompt": False}).json()["prompt"]
    assert prefilled == explicit and prefilled.endswith("Once upon")
    both = client.post("/v1/chat/completions", json={**body, "continue_final_message": True})
    assert both.status_code == 400
    assert both.json()["error"]["message"] == (
        "Cannot set both add_generation_prompt and continue_final_message to true.")
    assert client.post("/v1/chat/completions", json={**body, "continue_final_message": "content",
                                                     "add_generation_prompt": False}).status_code == 200
    echoed = client.post("/v1/chat/completions", json={**body, "max_tokens": 3, "echo": True}).json()
    plain = client.post("/v1/chat/completions", json={**body, "max_tokens": 3}).json()
    assert echoed["choices"][0]["message"]["content"] == "Once upon" + plain["choices"][0]["message"]["content"]
    chunks = payloads(client.post("/v1/chat/completions", json={**body, "max_tokens": 3, "echo": True,
                                                                "stream": True}).text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == echoed["choices"][0]["message"]["content"]


def test_responses_forced_function_call(client: httpx.Client) -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": CITY_TOOLS[0]["function"]["parameters"]}]
    body = {"input": "weather?", "tools": tools, "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 60, "seed": 4}
    out = client.post("/v1/responses", json=body).json()
    calls = [i for i in out["output"] if i["type"] == "function_call"]
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"])["city"] in ("Paris", "Rome")
    events = frames(client.post("/v1/responses", json={**body, "stream": True}).text)
    names = [n for n, _ in events]
    assert "response.function_call_arguments.delta" in names and names[-1] == "response.completed"

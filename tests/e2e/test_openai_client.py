"""The official ``openai`` Python client against mlxd: chat and completions, streamed and not, with tools."""

from __future__ import annotations

from typing import Any, Iterator

import openai
import pytest

from mlxd.api.state import ServingState
from mlxd.config import Config
from tests.e2e.api_harness import AppServer, served_model

TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def client(tiny_model: Any) -> Iterator[openai.OpenAI]:
    served = served_model(tiny_model, parallel=2, ctx_size=1024)
    server = AppServer(ServingState(config=Config(parallel=2, ctx_size=1024), model=served))
    yield openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    server.stop()
    served.worker.stop()


def test_chat_whole(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                                         seed=3, logprobs=True, top_logprobs=2)
    choice = out.choices[0]
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    assert out.usage is not None and out.usage.completion_tokens == 5
    assert choice.logprobs is not None and len(choice.logprobs.content or []) == 5


def test_chat_streamed_with_usage_matches_whole(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = dict(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                  temperature=0.9, seed=11)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8


def test_chat_with_tools(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model="tiny", messages=[
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ], tools=TOOLS, tool_choice="auto", max_tokens=4)
    assert out.choices[0].message.role == "assistant"
    streamed = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                   tools=TOOLS, max_tokens=4, stream=True))
    assert streamed[-1].choices[0].finish_reason in ("length", "stop", "tool_calls")


def test_completions_whole_and_streamed(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0.8, seed=4)
    assert whole.object == "text_completion" and whole.usage is not None and whole.usage.completion_tokens == 6
    stream = list(client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0.8,
                                            seed=4, stream=True))
    assert "".join(c.choices[0].text for c in stream if c.choices) == whole.choices[0].text


def test_refusal_surfaces_as_client_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                       extra_body={"grammar": "root ::= ("})
    assert "failed to parse grammar" in str(caught.value)


def test_forced_tool_call_through_the_client(client: openai.OpenAI) -> None:
    tools: list[Any] = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                                              "required": ["city"], "additionalProperties": False}}}]
    out = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "weather?"}],
                                         tools=tools, tool_choice="required", max_tokens=60, seed=4)
    calls = out.choices[0].message.tool_calls or []
    assert out.choices[0].finish_reason == "tool_calls" and calls[0].function.name == "get_weather"
    streamed = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "weather?"}],
                                                   tools=tools, tool_choice="required", max_tokens=60, seed=4,
                                                   stream=True))
    names = [t.function.name for c in streamed if c.choices for t in (c.choices[0].delta.tool_calls or [])
             if t.function and t.function.name]
    assert names == ["get_weather"]


def test_responses_api(client: openai.OpenAI) -> None:
    out = client.responses.create(model="tiny", input="hello", max_output_tokens=5)
    assert out.status == "completed" and out.usage is not None and out.usage.output_tokens == 5
    events = list(client.responses.create(model="tiny", input="hello", max_output_tokens=5, stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"


def test_against_the_daemon_process(server: Any) -> None:
    """The same client against a real ``mlxd-server`` process with its default options."""
    daemon = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    whole = daemon.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                           seed=2, temperature=0.5)
    streamed = list(daemon.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                   max_tokens=4, seed=2, temperature=0.5, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == whole.choices[0].message.content
    text = daemon.completions.create(model="tiny", prompt="Once", max_tokens=3)
    assert text.usage is not None and text.usage.completion_tokens == 3

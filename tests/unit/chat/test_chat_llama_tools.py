"""Llama 3.x tool calls (a bare JSON answer), the format chosen from the template, and streaming equivalence."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxd.engine.chat import (
    ChatOutputStream,
    ChatTemplate,
    LlamaToolCallStream,
    apply_chat_template,
    extract_llama_tool_calls,
    tool_call_format,
)
from tests.unit.chat.streamed_calls import assemble, holds_in_order

FIXTURES = Path(__file__).parent / "fixtures"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def counter() -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: f"id{next(numbers)}"


def calls(text: str) -> tuple[str, list[tuple[str, str]]]:
    content, found = extract_llama_tool_calls(text, id_factory=counter())
    return content, [(c.name, c.arguments_json) for c in found]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}', ("", [("get_weather", '{"city": "Paris"}')])),
    ('\n<|python_tag|>{"name": "f", "arguments": {}}  ', ("", [("f", "{}")])),
    ('{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}};', ("", [("f", '{"a": 1}'), ("g", "{}")])),
    ('{"name": "f", "parameters": "{\\"a\\": 1}"}', ("", [("f", '{"a": 1}')])),
])
def test_calls(text: str, expected: tuple[str, list[tuple[str, str]]]) -> None:
    assert calls(text) == expected


@pytest.mark.parametrize("text", [
    "The weather is fine.",
    '{"name": "f", "parameters": {}} and then some words',
    '{"city": "Paris"}',
    '{"name": "f", "parameters": NaN}',
    '{"name": "f"',
    "<|python_tag|>print(1)",
    "",
])
def test_anything_else_is_content(text: str) -> None:
    assert calls(text) == (text, [])


def test_format_follows_the_template() -> None:
    assert tool_call_format((FIXTURES / "llama3.jinja").read_text(encoding="utf-8")) == "llama3"
    assert tool_call_format((FIXTURES / "qwen3.jinja").read_text(encoding="utf-8")) == "hermes"
    assert tool_call_format(ChatTemplate("chatml").source) == "hermes"


def test_llama_prompt_parses_its_calls() -> None:
    template = ChatTemplate((FIXTURES / "llama3.jinja").read_text(encoding="utf-8"), bos_token="<s>")
    prompt = apply_chat_template(template, [{"role": "user", "content": "Weather?"}], tools=TOOLS)
    assert prompt.tool_call_format == "llama3" and prompt.parse_tool_calls
    stream = ChatOutputStream.for_prompt(prompt, id_factory=counter())
    deltas = stream.feed('{"name": "get_weather", ') + stream.feed('"parameters": {"city": "Paris"}}') + stream.finish()
    assert [d.to_openai() for d in deltas] == [
        {"tool_calls": [{"index": 0, "id": "id0", "type": "function", "function": {"name": "get_weather",
                                                                                   "arguments": "{"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"city": "Paris"}'}}]}]


def test_plain_answers_stream_at_once() -> None:
    stream = LlamaToolCallStream()
    assert stream.feed("  ") == ("", [])
    assert stream.feed("Sunny") == ("  Sunny", [])
    assert stream.feed(" all day") == (" all day", [])
    assert stream.finish() == ("", [])


FRAGMENTS = st.sampled_from(['{"name": "f", "parameters": {"x": 1}}', '{"name": "g"}', ";", " ", "\n", "<|python_tag|>",
                             "<|py", "{", "}", "word", "é"])


@settings(max_examples=300, derandomize=True, deadline=None)
@given(text=st.lists(FRAGMENTS, max_size=8).map("".join), points=st.lists(st.integers(0, 120), max_size=8))
def test_any_split_streams_to_the_whole_parse(text: str, points: list[int]) -> None:
    content, found = extract_llama_tool_calls(text, id_factory=counter())
    bounds = sorted({min(p, len(text)) for p in points}) + [len(text)]
    for stream_arguments in (True, False):
        stream = LlamaToolCallStream(id_factory=counter(), stream_arguments=stream_arguments)
        streamed, deltas = "", []
        for a, b in zip([0] + bounds, bounds):
            piece, more = stream.feed(text[a:b])
            streamed += piece
            deltas += more
        piece, more = stream.finish()
        calls = assemble(deltas + more)
        assert streamed + piece == content
        if stream_arguments:
            assert holds_in_order([(c.name, c.arguments_json) for c in found], [(n, a) for _, n, a in calls])
        else:
            assert calls == [(c.id, c.name, c.arguments_json) for c in found]

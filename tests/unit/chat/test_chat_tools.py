"""Hermes/Qwen tool calls in model output: whole and streamed, malformed blocks kept as content."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxd.engine.chat import ToolCall, ToolCallDelta, ToolCallStream, extract_tool_calls, new_tool_call_id


def counter() -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: f"id{next(numbers)}"


def calls(text: str) -> tuple[str, list[tuple[str, str]]]:
    content, found = extract_tool_calls(text, id_factory=counter())
    return content, [(c.name, c.arguments_json) for c in found]


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}\n</tool_call>'
PARSED = ("get_weather", '{"city":"Paris","unit":"°C"}')


@pytest.mark.parametrize(("text", "expected"), [
    (CALL, ("", [PARSED])),
    ("Let me check.\n\n" + CALL, ("Let me check.", [PARSED])),
    (CALL + "\n" + CALL, ("", [PARSED, PARSED])),
    (CALL + "\n\nDone. ", ("Done. ", [PARSED])),
    ("no calls here  ", ("no calls here  ", [])),
    ('<tool_call>{"name": "f"}</tool_call>', ("", [("f", "{}")])),
    ('<tool_call>{"name": "f", "parameters": {"a": [1, 2]}}</tool_call>', ("", [("f", '{"a":[1,2]}')])),
    ('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', ("", [("f", '{"a": 1}')])),
])
def test_extract(text: str, expected: tuple[str, list[tuple[str, str]]]) -> None:
    assert calls(text) == expected


@pytest.mark.parametrize("block", [
    "<tool_call>{not json}</tool_call>",
    '<tool_call>{"arguments": {}}</tool_call>',
    '<tool_call>{"name": ""}</tool_call>',
    '<tool_call>["f"]</tool_call>',
    '<tool_call>{"name": "f", "arguments": NaN}</tool_call>',
    '<tool_call>{"name": "f"',
])
def test_malformed_blocks_stay_content(block: str) -> None:
    text = "before " + block + " after"
    assert calls(text) == (text, [])


def test_malformed_block_beside_a_good_one() -> None:
    text = "A <tool_call>oops</tool_call> " + CALL + " B"
    assert calls(text) == ("A <tool_call>oops</tool_call>B", [PARSED])


def test_ids_are_32_letters_and_digits_and_distinct() -> None:
    ids = {new_tool_call_id() for _ in range(50)}
    assert len(ids) == 50 and all(re.fullmatch(r"[0-9A-Za-z]{32}", i) for i in ids)
    _, found = extract_tool_calls(CALL + CALL)
    assert found[0].id != found[1].id


def test_openai_shapes() -> None:
    call = ToolCall(id="abc", name="f", arguments_json='{"a":1}')
    assert call.to_openai() == {"id": "abc", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    delta = ToolCallDelta(index=1, id="abc", name="f", arguments="{}")
    assert delta.to_openai() == {"index": 1, "id": "abc", "type": "function",
                                 "function": {"name": "f", "arguments": "{}"}}


def test_stream_holds_a_call_until_it_closes() -> None:
    stream = ToolCallStream(id_factory=counter())
    assert stream.feed("Checking  ") == ("Checking", [])
    assert stream.feed("<tool_") == ("", [])
    assert stream.feed('call>{"name": "f", ') == ("", [])
    assert stream.in_tool_call
    assert stream.feed('"arguments": {}}</tool_call>\n ok') == ("ok", [ToolCallDelta(0, "id0", "f", "{}")])
    assert not stream.in_tool_call
    assert stream.feed(" \n") == ("", [])
    assert stream.finish() == (" \n", [])


def test_stream_unclosed_block_is_content_at_the_end() -> None:
    stream = ToolCallStream(id_factory=counter())
    assert stream.feed('x <tool_call>{"name": "f"') == ("x", [])
    assert stream.finish() == (' <tool_call>{"name": "f"', [])


def _stream(pieces: list[str]) -> tuple[str, list[tuple[str, str, str]]]:
    stream = ToolCallStream(id_factory=counter())
    content: list[str] = []
    found: list[ToolCallDelta] = []
    for piece in pieces + [None]:  # type: ignore[list-item]
        text, deltas = stream.finish() if piece is None else stream.feed(piece)
        content.append(text)
        found.extend(deltas)
    assert [d.index for d in found] == list(range(len(found)))
    return "".join(content), [(d.id, d.name, d.arguments) for d in found]


FRAGMENTS = st.sampled_from([
    "<tool_call>", "</tool_call>", "<tool_", "call>", '{"name": "f", "arguments": {"x": 1}}', '{"name": "g"}',
    "{bad", " ", "\n", "text", "<", ">", "é",
])
TEXTS = st.lists(FRAGMENTS, max_size=14).map("".join)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(text=TEXTS, points=st.lists(st.integers(0, 200), max_size=10))
def test_any_split_streams_to_the_whole_parse(text: str, points: list[int]) -> None:
    content, found = extract_tool_calls(text, id_factory=counter())
    expected = (content, [(c.id, c.name, c.arguments_json) for c in found])
    bounds = sorted({min(p, len(text)) for p in points}) + [len(text)]
    pieces = [text[a:b] for a, b in zip([0] + bounds, bounds)]
    assert _stream(pieces) == expected
    assert _stream(list(text)) == expected

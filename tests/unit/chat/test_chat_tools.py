"""Hermes/Qwen tool calls in model output: whole and streamed (a call announced once its name is written, then its
arguments piece by piece, as llama-server streams them), malformed blocks kept as content."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxd.engine.chat import ToolCall, ToolCallDelta, ToolCallStream, extract_tool_calls, new_tool_call_id
from tests.unit.chat.streamed_calls import assemble, holds_in_order


def counter() -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: f"id{next(numbers)}"


def calls(text: str) -> tuple[str, list[tuple[str, str]]]:
    content, found = extract_tool_calls(text, id_factory=counter())
    return content, [(c.name, c.arguments_json) for c in found]


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}\n</tool_call>'
PARSED = ("get_weather", '{"city": "Paris", "unit": "°C"}')  # the model's own JSON text, as llama-server keeps it


@pytest.mark.parametrize(("text", "expected"), [
    (CALL, ("", [PARSED])),
    ("Let me check.\n\n" + CALL, ("Let me check.", [PARSED])),
    (CALL + "\n" + CALL, ("", [PARSED, PARSED])),
    (CALL + "\n\nDone. ", ("Done. ", [PARSED])),
    ("no calls here  ", ("no calls here  ", [])),
    ('<tool_call>{"name": "f"}</tool_call>', ("", [("f", "{}")])),
    ('<tool_call>{"name": "f", "parameters": {"a": [1, 2]}}</tool_call>', ("", [("f", '{"a": [1, 2]}')])),
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


def test_stream_announces_a_call_then_its_arguments() -> None:
    stream = ToolCallStream(id_factory=counter())
    assert stream.feed("Checking  ") == ("Checking", [])
    assert stream.feed("<tool_") == ("", [])
    assert stream.feed('call>{"name": "f", ') == ("", [ToolCallDelta(0, "id0", "f", "{")])
    assert stream.in_tool_call
    assert stream.feed('"arguments": {"city": "Pa') == ("", [ToolCallDelta(0, "", "", '"city": "Pa')])
    assert stream.feed("ris\\") == ("", [ToolCallDelta(0, "", "", "ris")])  # half an escape is held
    assert stream.feed('n",  ') == ("", [ToolCallDelta(0, "", "", '\\n",')])  # and trailing whitespace
    assert stream.feed('"days": 3}}</tool_call>\n ok') == ("ok", [ToolCallDelta(0, "", "", '  "days": 3}')])
    assert not stream.in_tool_call
    assert stream.feed(" \n") == ("", [])
    assert stream.finish() == (" \n", [])


def test_whole_parse_shows_each_call_once_complete() -> None:
    stream = ToolCallStream(id_factory=counter(), stream_arguments=False)
    assert stream.feed('<tool_call>{"name": "f", ') == ("", [])
    assert stream.feed('"arguments": {}}</tool_call>') == ("", [ToolCallDelta(0, "id0", "f", "{}")])


def test_stream_unclosed_block_is_content_at_the_end() -> None:
    stream = ToolCallStream(id_factory=counter())
    assert stream.feed('x <tool_call>{"name": "f"') == ("x", [ToolCallDelta(0, "id0", "f", "{")])
    # The region never closed: its text is content, as in the whole parse; the announced call stays.
    assert stream.finish() == (' <tool_call>{"name": "f"', [])


def test_parallel_calls_take_the_next_indices() -> None:
    stream = ToolCallStream(id_factory=counter())
    deltas = []
    text = CALL + "\n" + CALL
    for i in range(0, len(text), 5):
        deltas += stream.feed(text[i:i + 5])[1]
    deltas += stream.finish()[1]
    assert assemble(deltas) == [("id0", *PARSED), ("id1", *PARSED)]


def _stream(pieces: list[str], stream_arguments: bool = True) -> tuple[str, list[tuple[str, str, str]]]:
    stream = ToolCallStream(id_factory=counter(), stream_arguments=stream_arguments)
    content: list[str] = []
    found: list[ToolCallDelta] = []
    for piece in pieces + [None]:  # type: ignore[list-item]
        text, deltas = stream.finish() if piece is None else stream.feed(piece)
        content.append(text)
        found.extend(deltas)
    return "".join(content), assemble(found)


FRAGMENTS = st.sampled_from([
    "<tool_call>", "</tool_call>", "<tool_", "call>", '{"name": "f", "arguments": {"x": 1}}', '{"name": "g"}',
    "{bad", " ", "\n", "text", "<", ">", "é",
])
TEXTS = st.lists(FRAGMENTS, max_size=14).map("".join)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(text=TEXTS, points=st.lists(st.integers(0, 200), max_size=10))
def test_any_split_streams_to_the_whole_parse(text: str, points: list[int]) -> None:
    content, found = extract_tool_calls(text, id_factory=counter())
    whole = [(c.name, c.arguments_json) for c in found]
    bounds = sorted({min(p, len(text)) for p in points}) + [len(text)]
    pieces = [text[a:b] for a, b in zip([0] + bounds, bounds)]
    for cut in (pieces, list(text)):
        streamed_content, streamed = _stream(cut)
        assert streamed_content == content
        assert holds_in_order(whole, [(n, a) for _, n, a in streamed])
        assert _stream(cut, stream_arguments=False) == (content, [(c.id, c.name, c.arguments_json) for c in found])

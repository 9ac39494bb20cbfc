"""A whole chat answer parsed at once equals the same answer streamed in any cut: reasoning, content, tool calls."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from mlxd.engine.chat import (
    ChatDelta,
    ChatMessage,
    ChatOutputStream,
    ChatTemplate,
    ReasoningFormat,
    ToolCall,
    ToolCallFormat,
    apply_chat_template,
    parse_chat_output,
)
from tests.unit.chat.streamed_calls import assemble, holds_in_order

QWEN_ANSWER = (
    "<think>\nThe user wants the weather.\n</think>\n\n"
    "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
)


def counter() -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: f"call{next(numbers)}"


def test_qwen_answer_whole() -> None:
    message = parse_chat_output(QWEN_ANSWER, parse_tool_calls=True, id_factory=counter())
    assert message == ChatMessage(
        content="Let me look.",
        reasoning_content="The user wants the weather.",
        tool_calls=(ToolCall("call0", "get_weather", '{"city": "Paris"}'),),
    )


def test_tool_calls_are_not_parsed_unless_asked() -> None:
    message = parse_chat_output(QWEN_ANSWER)
    assert message.tool_calls == () and message.content.startswith("Let me look.\n<tool_call>")


def test_stream_deltas_in_openai_shape() -> None:
    stream = ChatOutputStream(parse_tool_calls=True, id_factory=counter())
    deltas: list[ChatDelta] = []
    for token in ["<think>", "\nThe user", " wants the weather.\n", "</think>", "\n\nLet", " me look.\n",
                  "<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "Pa', 'ris"}}\n', "</tool_call>"]:
        deltas += stream.feed(token)
    deltas += stream.finish()
    # llama-server's sequence: the call's index, id, type and name with the arguments so far, then pieces.
    assert [d.to_openai() for d in deltas] == [
        {"reasoning_content": "The user"},
        {"reasoning_content": " wants the weather."},
        {"content": "Let"},
        {"content": " me look."},
        {"tool_calls": [{"index": 0, "id": "call0", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Pa'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]},
    ]
    assert stream.message() == parse_chat_output(QWEN_ANSWER, parse_tool_calls=True, id_factory=counter())


def test_stream_for_a_forced_open_prompt() -> None:
    template = ChatTemplate("{{ messages[0].content }}{% if add_generation_prompt %}<think>\n{% endif %}")
    prompt = apply_chat_template(template, [{"role": "user", "content": "q"}])
    stream = ChatOutputStream.for_prompt(prompt)
    assert stream.in_reasoning
    deltas = stream.feed("hmm</think>A") + stream.finish()
    assert [d.to_openai() for d in deltas] == [{"reasoning_content": "hmm"}, {"content": "A"}]
    assert not stream.in_reasoning


FRAGMENTS = st.sampled_from([
    "<think>", "</think>", "<thi", "</th", "<tool_call>", "</tool_call>", "<tool_",
    '{"name": "f", "arguments": {"x": 1}}', '{"name": "g", "parameters": {}}', ";", "{bad", " ", "\n", "word", "<", "é",
])
TEXTS = st.lists(FRAGMENTS, max_size=16).map("".join)
FORMATS = st.sampled_from(["none", "deepseek", "deepseek-legacy", "auto"])


@settings(max_examples=400, derandomize=True, deadline=None)
@given(text=TEXTS, points=st.lists(st.integers(0, 250), max_size=12), fmt=FORMATS, starts=st.booleans(),
       tools=st.booleans(), calls=st.sampled_from(["hermes", "llama3"]))
def test_any_split_streams_to_the_whole_parse(text: str, points: list[int], fmt: ReasoningFormat, starts: bool,
                                              tools: bool, calls: ToolCallFormat) -> None:
    expected = parse_chat_output(text, reasoning_format=fmt, starts_in_reasoning=starts, parse_tool_calls=tools,
                                 tool_call_format=calls, id_factory=counter())
    bounds = sorted({min(p, len(text)) for p in points}) + [len(text)]
    stream = ChatOutputStream(reasoning_format=fmt, starts_in_reasoning=starts, parse_tool_calls=tools,
                              tool_call_format=calls, id_factory=counter())
    deltas: list[ChatDelta] = []
    for a, b in zip([0] + bounds, bounds):
        deltas += stream.feed(text[a:b])
    deltas += stream.finish()
    message = stream.message()
    assert (message.content, message.reasoning_content) == (expected.content, expected.reasoning_content)
    streamed = [(c.name, c.arguments_json) for c in message.tool_calls]
    assert holds_in_order([(c.name, c.arguments_json) for c in expected.tool_calls], streamed)
    assert assemble(c for d in deltas for c in d.tool_calls) == [(c.id, c.name, c.arguments_json)
                                                               for c in message.tool_calls]
    assert "".join(d.content for d in deltas) == expected.content
    assert "".join(d.reasoning_content for d in deltas) == expected.reasoning_content
    assert all(d.to_openai() for d in deltas)  # never an empty delta
    whole = ChatOutputStream(reasoning_format=fmt, starts_in_reasoning=starts, parse_tool_calls=tools,
                             tool_call_format=calls, id_factory=counter(), stream_arguments=False)
    for a, b in zip([0] + bounds, bounds):
        whole.feed(text[a:b])
    whole.finish()
    assert whole.message() == expected

"""gpt-oss's channels read as they stream: reasoning, content and calls, whatever the deltas' sizes."""

from __future__ import annotations

import json

import pytest

from mlxd.engine.chat.harmony import HarmonyStream
from mlxd.engine.chat.tool_types import ToolCallDelta

ANSWER = (
    "<|channel|>analysis<|message|>The user wants the weather. <|end|> is a tag, <|e is not.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris", "days": 3}<|call|>'
    "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.<|return|>"
)


def read(text: str, size: int) -> tuple[str, str, list[tuple[str, str]], list[bool]]:
    """Reasoning, content and calls (name, arguments) of ``text`` fed ``size`` characters at a time, and
    ``in_reasoning`` after each delta."""
    stream = HarmonyStream(id_factory=iter(f"call{i}" for i in range(9)).__next__)
    outs, inside = [], []
    for i in range(0, len(text), size):
        outs.append(stream.feed(text[i:i + size]))
        inside.append(stream.in_reasoning)
    outs.append(stream.finish())
    deltas = [d for _, _, ds in outs for d in ds]
    return "".join(r for r, _, _ in outs), "".join(c for _, c, _ in outs), calls_of(deltas), inside


def calls_of(deltas: list[ToolCallDelta]) -> list[tuple[str, str]]:
    calls: list[tuple[str, list[str]]] = []
    for d in deltas:
        if d.id:
            calls.append((d.name, [d.arguments]))
        else:
            calls[d.index][1].append(d.arguments)
    return [(name, "".join(pieces)) for name, pieces in calls]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, len(ANSWER)])
def test_channels_read_alike_whatever_the_deltas(size: int) -> None:
    reasoning, content, calls, _ = read(ANSWER, size)
    # The first <|end|> closes the analysis message: what follows it up to the next header is no message's text.
    assert reasoning == "The user wants the weather. "
    assert content == "It is sunny in Paris."
    assert [(name, json.loads(args)) for name, args in calls] == [("get_weather", {"city": "Paris", "days": 3})]


def test_a_tag_split_across_deltas_is_held_not_sent() -> None:
    stream = HarmonyStream()
    assert stream.feed("<|channel|>analysis<|message|>thinking<|en") == ("thinking", "", [])
    assert stream.in_reasoning
    assert stream.feed("d|><|start|>assistant<|channel|>final<|message|>done <|") == ("", "done ", [])
    assert not stream.in_reasoning
    assert stream.feed("x") == ("", "<|x", [])
    assert stream.finish() == ("", "", [])


def test_in_reasoning_follows_the_analysis_channel() -> None:
    text = "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>"
    _, _, _, inside = read(text, 1)
    opened, closed = text.index("hmm"), text.index("<|end|>") + len("<|end|>")
    assert inside[opened - 1:closed - 1] == [True] * (closed - opened)
    assert not any(inside[: opened - 1]) and not any(inside[closed - 1:])


def test_text_without_a_header_is_content_at_the_end() -> None:
    stream = HarmonyStream()
    assert stream.feed("Just an answer <|mess") == ("", "", [])
    assert stream.finish() == ("", "Just an answer <|mess", [])


def test_a_call_whose_body_is_not_a_json_object_is_text() -> None:
    text = "<|channel|>commentary to=functions.get_weather<|message|>[1, 2]<|call|>"
    for size, announced in ((1, [("get_weather", "{")]), (len(text), [])):
        reasoning, content, calls, _ = read(text, size)
        assert (reasoning, content) == ("", "[1, 2]")
        # A call is announced with "{" as soon as its empty body begins (as llama-server does), before the body
        # turns out not to be an object; read whole, it never was a call.
        assert calls == announced


def test_an_open_message_at_the_end_keeps_all_its_text() -> None:
    reasoning, content, _, _ = read("<|channel|>analysis<|message|>cut off at <|en", 3)
    assert (reasoning, content) == ("cut off at <|en", "")

"""An answer with reasoning and a tool call, shaped for OpenAI chat, Anthropic and Responses, whole and streamed."""

from __future__ import annotations

import json

import pytest

from mlxd.api.chat import ChatParser, parse_whole
from mlxd.api.render import anthropic as ant
from mlxd.api.render import openai as oai
from mlxd.api.render import responses as resp
from mlxd.engine.chat.prompt import ChatPrompt
from mlxd.engine.types import FinalEvent, Timings

ANSWER = '<think>\nthe user wants weather\n</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", ' \
         '"arguments": {"city": "Paris"}}\n</tool_call>'
PROMPT = ChatPrompt(prompt="", reasoning_format="deepseek", enable_thinking=True, starts_in_reasoning=False,
                    parse_tool_calls=True, prefilled=False)
FINAL = FinalEvent(text=ANSWER, tokens=(1, 2, 3), stop_type="eos", stopping_word="", truncated=False,
                   n_prompt_tokens=7, timings=Timings(cache_n=0, prompt_n=7, prompt_ms=1.0, predicted_n=3,
                                                      predicted_ms=1.0), id_slot=0)


def _streamed(cut: int) -> tuple[ChatParser, list]:
    parser = ChatParser(PROMPT)
    diffs = []
    for i in range(0, len(ANSWER), cut):
        diffs += parser.feed(ANSWER[i:i + cut])
    diffs += parser.finish()
    return parser, diffs


def test_whole_answer_splits_reasoning_content_and_call() -> None:
    msg = parse_whole(PROMPT, ANSWER)
    assert msg.reasoning == "the user wants weather"
    assert msg.content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [("get_weather", {"city": "Paris"})]
    out = oai.message_json(msg)
    assert out["reasoning_content"] == "the user wants weather"
    assert out["tool_calls"][0]["function"]["name"] == "get_weather"
    choice = oai.chat_choice(msg, FINAL, 0, None)
    assert choice["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("cut", [1, 3, 7, 1000])
def test_streamed_diffs_rebuild_the_whole_message(cut: int) -> None:
    parser, diffs = _streamed(cut)
    whole = parse_whole(PROMPT, ANSWER)
    assert parser.message.content == whole.content and parser.message.reasoning == whole.reasoning
    deltas = [oai.delta_json(d) for d in diffs]
    assert "".join(d.get("content", "") for d in deltas) == whole.content
    assert "".join(d.get("reasoning_content", "") for d in deltas) == whole.reasoning
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["type"] == "function"


def test_anthropic_blocks_whole_and_streamed() -> None:
    msg = parse_whole(PROMPT, ANSWER)
    whole = ant.message(msg, FINAL, msg_id="m", model="tiny")
    assert [b["type"] for b in whole["content"]] == ["thinking", "text", "tool_use"]
    assert whole["content"][2]["input"] == {"city": "Paris"} and whole["stop_reason"] == "tool_use"
    parser, diffs = _streamed(5)
    stream = ant.AnthropicStream("m", "tiny")
    events = stream.start(7) + [e for d in diffs for e in stream.diff(d)]
    events += stream.finish(FINAL, bool(parser.message.tool_calls))
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0, 1, 2]
    partial = "".join(d["delta"]["partial_json"] for n, d in events
                      if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
    assert json.loads(partial) == {"city": "Paris"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_responses_items_whole_and_streamed() -> None:
    msg = parse_whole(PROMPT, ANSWER)
    whole = resp.response(msg, FINAL, resp_id="resp_1", model="tiny")
    assert [i["type"] for i in whole["output"]] == ["reasoning", "message", "function_call"]
    parser, diffs = _streamed(4)
    stream = resp.ResponsesStream("resp_1", "tiny")
    events = stream.start() + [e for d in diffs for e in stream.diff(d)] + stream.finish(parser.message, FINAL)
    names = [n for n, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert "response.reasoning_text.delta" in names and "response.function_call_arguments.delta" in names
    done = events[-1][1]["response"]
    assert [i["type"] for i in done["output"]] == ["reasoning", "message", "function_call"]
    # OpenAI's indices (issue 28, item 16): every event numbered in order; items placed as they were opened.
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    placed = {data["item"]["id"]: data["output_index"] for name, data in events if name == "response.output_item.added"}
    assert sorted(placed.values()) == [0, 1, 2]
    assert [placed[i["id"]] for i in done["output"]] == [0, 1, 2]
    for name, data in events:
        if "item_id" in data:
            assert data["output_index"] == placed[data["item_id"]], name
        if name.startswith(("response.output_text", "response.content_part", "response.reasoning_text")):
            assert data["content_index"] == 0, name
        if name == "response.output_item.done":
            assert data["output_index"] == placed[data["item"]["id"]]


def test_no_tool_parsing_keeps_the_markup_as_content() -> None:
    plain = ChatPrompt(prompt="", reasoning_format="none", enable_thinking=False, starts_in_reasoning=False,
                       parse_tool_calls=False, prefilled=False)
    msg = parse_whole(plain, ANSWER)
    assert msg.content == ANSWER and not msg.tool_calls and not msg.reasoning

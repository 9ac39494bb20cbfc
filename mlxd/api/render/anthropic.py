"""Anthropic Messages objects as b10621 shapes them: the whole message and its streaming event sequence.

A stream is ``message_start``, then per content block ``content_block_start`` / ``content_block_delta``... /
``content_block_stop`` (a ``ping`` follows the first block's start), then ``message_delta`` and ``message_stop``.
Blocks come in the order they open: thinking, text, then one ``tool_use`` per call.
"""

from __future__ import annotations

import json
from typing import Any

from mlxd.api.render.message import AssistantMessage, MessageDiff
from mlxd.engine import FinalEvent

Event = tuple[str, dict[str, Any]]


def stop_reason(stop_type: str, has_tool_calls: bool) -> str:
    if stop_type in ("eos", "word"):
        return "tool_use" if has_tool_calls else "end_turn"
    return "max_tokens"


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return {}


def message(msg: AssistantMessage, final: FinalEvent, *, msg_id: str, model: str) -> dict[str, Any]:
    """The non-streamed ``message`` object."""
    blocks: list[dict[str, Any]] = []
    if msg.reasoning:
        blocks.append({"type": "thinking", "thinking": msg.reasoning, "signature": ""})
    if msg.content:
        blocks.append({"type": "text", "text": msg.content})
    for call in msg.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)})
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "content": blocks,
        "model": model,
        "stop_reason": stop_reason(final.stop_type, bool(msg.tool_calls)),
        "stop_sequence": final.stopping_word or None,
        "usage": usage(final.n_prompt_tokens, final.timings.cache_n, len(final.tokens)),
    }


def usage(n_prompt: int, cached: int, n_output: int) -> dict[str, int]:
    """Anthropic usage as b10621 reports it: the prompt tokens read from the cache apart from the others."""
    return {"cache_read_input_tokens": cached, "input_tokens": n_prompt - cached, "output_tokens": n_output}


class AnthropicStream:
    """Turns message diffs into Anthropic stream events, keeping the block bookkeeping."""

    def __init__(self, msg_id: str, model: str) -> None:
        self.msg_id = msg_id
        self.model = model
        self._open: list[int] = []
        self._next = 0
        self._thinking: int | None = None
        self._text: int | None = None
        self._tools: dict[int, int] = {}
        self._pinged = False

    def start(self, n_prompt: int) -> list[Event]:
        return [("message_start", {"type": "message_start", "message": {
            "id": self.msg_id, "type": "message", "role": "assistant", "content": [], "model": self.model,
            "stop_reason": None, "stop_sequence": None, "usage": usage(n_prompt, 0, 0),
        }})]

    def _open_block(self, block: dict[str, Any]) -> tuple[int, list[Event]]:
        index = self._next
        self._next += 1
        self._open.append(index)
        events: list[Event] = [("content_block_start",
                                {"type": "content_block_start", "index": index, "content_block": block})]
        if not self._pinged:
            events.append(("ping", {"type": "ping"}))
            self._pinged = True
        return index, events

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> Event:
        return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def diff(self, d: MessageDiff) -> list[Event]:
        events: list[Event] = []
        if d.reasoning:
            if self._thinking is None:
                self._thinking, opened = self._open_block({"type": "thinking", "thinking": ""})
                events += opened
            events.append(self._delta(self._thinking, {"type": "thinking_delta", "thinking": d.reasoning}))
        if d.content:
            if self._text is None:
                self._text, opened = self._open_block({"type": "text", "text": ""})
                events += opened
            events.append(self._delta(self._text, {"type": "text_delta", "text": d.content}))
        if d.tool_index is not None:
            if d.tool_index not in self._tools:
                # b10622's tool_use block opens without an "input" key: the input_json_delta pieces make it.
                index, opened = self._open_block({"type": "tool_use", "id": d.tool_id, "name": d.tool_name})
                self._tools[d.tool_index] = index
                events += opened
            if d.tool_arguments:
                events.append(self._delta(self._tools[d.tool_index],
                                          {"type": "input_json_delta", "partial_json": d.tool_arguments}))
        return events

    def finish(self, final: FinalEvent, has_tool_calls: bool) -> list[Event]:
        events: list[Event] = []
        for index in self._open:
            if index == self._thinking:
                events.append(self._delta(index, {"type": "signature_delta", "signature": ""}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(final.stop_type, has_tool_calls),
                      "stop_sequence": final.stopping_word or None},
            "usage": {"output_tokens": len(final.tokens)},
        }))
        events.append(("message_stop", {"type": "message_stop"}))
        return events

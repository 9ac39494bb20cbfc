"""OpenAI Responses objects as b10621 shapes them: the ``response`` object and its streaming events."""

from __future__ import annotations

import time
from typing import Any

from mlxd.api.render.message import AssistantMessage, MessageDiff
from mlxd.api.render.openai import random_id
from mlxd.engine import FinalEvent

Event = tuple[str, dict[str, Any]]


def _usage(final: FinalEvent) -> dict[str, int]:
    n_out = len(final.tokens)
    return {"input_tokens": final.n_prompt_tokens, "output_tokens": n_out,
            "total_tokens": final.n_prompt_tokens + n_out}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "summary": [], "type": "reasoning",
            "content": [{"text": text, "type": "reasoning_text"}], "encrypted_content": "", "status": "completed"}


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {"content": [_text_part(text)], "id": item_id, "role": "assistant", "status": "completed",
            "type": "message"}


def _call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    # As b10622 names a call's item: "fc_" + the call's id, and "call_" + it for the call_id a tool result answers.
    return {"type": "function_call", "id": "fc_" + call_id, "status": "completed", "arguments": arguments,
            "call_id": "call_" + call_id, "name": name}


def output_items(msg: AssistantMessage, reasoning_id: str, message_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if msg.reasoning:
        items.append(_reasoning_item(reasoning_id, msg.reasoning))
    if msg.content:
        items.append(_message_item(message_id, msg.content))
    items += [_call_item(c.id, c.name, c.arguments) for c in msg.tool_calls]
    return items


def response(msg: AssistantMessage, final: FinalEvent, *, resp_id: str, model: str) -> dict[str, Any]:
    """The non-streamed ``response`` object."""
    now = int(time.time())
    return {
        "completed_at": now,
        "created_at": now,
        "id": resp_id,
        "model": model,
        "object": "response",
        "output": output_items(msg, random_id("rs_"), random_id("msg_")),
        "status": "completed",
        "usage": _usage(final),
    }


class ResponsesStream:
    """Turns message diffs into Responses stream events.

    Beyond b10621's events, each carries ``sequence_number`` (0, 1, ... in the order sent), and the item and part
    events ``output_index`` (the item's place in the response's ``output``) and ``content_index`` (the part's place
    in the item's content): OpenAI's stream carries them, and its SDK's ``responses.stream()`` helper indexes its
    snapshot by them. A b10621 client ignores fields it does not read.
    """

    def __init__(self, resp_id: str, model: str) -> None:
        self.resp_id = resp_id
        self.model = model
        self.reasoning_id = random_id("rs_")
        self.message_id = random_id("msg_")
        self._reasoning_open = False
        self._text_open = False
        self._call_ids: dict[int, str] = {}
        self._output_index: dict[str, int] = {}  # item id -> its place in the response's output, as opened
        self._sequence = 0

    def _index(self, item_id: str) -> int:
        return self._output_index.setdefault(item_id, len(self._output_index))

    def _numbered(self, events: list[Event]) -> list[Event]:
        for _, data in events:
            data["sequence_number"] = self._sequence
            self._sequence += 1
        return events

    def start(self) -> list[Event]:
        head = {"id": self.resp_id, "object": "response", "status": "in_progress"}
        return self._numbered([("response.created", {"type": "response.created", "response": head}),
                               ("response.in_progress", {"type": "response.in_progress", "response": dict(head)})])

    def progress(self, prompt_progress: dict[str, int]) -> list[Event]:
        """Prompt processing so far (``return_progress``): another ``response.in_progress``, as b10621 sends."""
        head = {"id": self.resp_id, "object": "response", "status": "in_progress"}
        return self._numbered([("response.in_progress", {"type": "response.in_progress", "response": head,
                                                         "prompt_progress": prompt_progress})])

    def diff(self, d: MessageDiff) -> list[Event]:
        return self._numbered(self._diff(d))

    def _diff(self, d: MessageDiff) -> list[Event]:
        events: list[Event] = []
        if d.reasoning:
            if not self._reasoning_open:
                self._reasoning_open = True
                events.append(("response.output_item.added", {"type": "response.output_item.added", "item": {
                    "id": self.reasoning_id, "summary": [], "type": "reasoning", "content": [],
                    "encrypted_content": "", "status": "in_progress"}, "output_index": self._index(self.reasoning_id)}))
            events.append(("response.reasoning_text.delta", {"type": "response.reasoning_text.delta",
                                                              "delta": d.reasoning, "item_id": self.reasoning_id,
                                                              "output_index": self._index(self.reasoning_id),
                                                              "content_index": 0}))
        if d.content:
            if not self._text_open:
                self._text_open = True
                events.append(("response.output_item.added", {"type": "response.output_item.added", "item": {
                    "content": [], "id": self.message_id, "role": "assistant", "status": "in_progress",
                    "type": "message"}, "output_index": self._index(self.message_id)}))
                events.append(("response.content_part.added", {"type": "response.content_part.added",
                                                                "item_id": self.message_id,
                                                                "part": {"type": "output_text", "text": ""},
                                                                "output_index": self._index(self.message_id),
                                                                "content_index": 0}))
            events.append(("response.output_text.delta", {"type": "response.output_text.delta",
                                                           "item_id": self.message_id, "delta": d.content,
                                                           "output_index": self._index(self.message_id),
                                                           "content_index": 0}))
        if d.tool_index is not None:
            if d.tool_name and d.tool_index not in self._call_ids:
                self._call_ids[d.tool_index] = d.tool_id
                events.append(("response.output_item.added", {"type": "response.output_item.added", "item": {
                    "id": "fc_" + d.tool_id, "arguments": "", "call_id": "call_" + d.tool_id, "name": d.tool_name,
                    "type": "function_call", "status": "in_progress"}, "output_index": self._index("fc_" + d.tool_id)}))
            if d.tool_arguments:
                item_id = "fc_" + self._call_ids.get(d.tool_index, "")
                events.append(("response.function_call_arguments.delta", {
                    "type": "response.function_call_arguments.delta", "delta": d.tool_arguments,
                    "item_id": item_id, "output_index": self._index(item_id)}))
        return events

    def finish(self, msg: AssistantMessage, final: FinalEvent) -> list[Event]:
        events: list[Event] = []
        done: list[tuple[int, dict[str, Any]]] = []  # (output index, item)

        def item_done(item: dict[str, Any]) -> None:
            index = self._index(item["id"])
            events.append(("response.output_item.done", {"type": "response.output_item.done", "item": item,
                                                         "output_index": index}))
            done.append((index, item))

        if msg.reasoning:
            item_done(_reasoning_item(self.reasoning_id, msg.reasoning))
        if msg.content:
            at = {"output_index": self._index(self.message_id), "content_index": 0}
            events.append(("response.output_text.done", {"type": "response.output_text.done",
                                                          "item_id": self.message_id, "text": msg.content, **at}))
            events.append(("response.content_part.done", {"type": "response.content_part.done",
                                                           "item_id": self.message_id,
                                                           "part": _text_part(msg.content), **at}))
            item_done(_message_item(self.message_id, msg.content))
        for call in msg.tool_calls:
            item_done(_call_item(call.id, call.name, call.arguments))
        output = [item for _, item in sorted(done, key=lambda pair: pair[0])]
        events.append(("response.completed", {"type": "response.completed", "response": {
            "id": self.resp_id, "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": self.model, "output": output, "usage": _usage(final)}}))
        return self._numbered(events)

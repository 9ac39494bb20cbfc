"""gpt-oss answers (OpenAI's "harmony" channels): reasoning, content and tool calls, whole or as they stream.

After the generation prompt ``<|start|>assistant`` the model writes messages, each a header and a body (below, a
call's ``<|call|>`` is on a line of its own only to fit the page)::

    <|channel|>analysis<|message|>...reasoning...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
    <|call|>
    <|start|>assistant<|channel|>final<|message|>...the answer...<|return|>

The ``analysis`` channel is ``reasoning_content``, ``final`` (and a ``commentary`` preamble addressed to no tool)
is content, and a message addressed ``to=functions.NAME`` is a call of NAME with its body as JSON arguments (the
model's own text, as llama-server returns it); a call whose body is not a JSON object stays content (its body). The
stream re-reads the text it holds at each delta and emits what grew, holding back a tag still being written, so
that its output equals the whole-text parse; a call's arguments stream as they are written (engine.chat.call_deltas).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from mlxd.engine.chat.call_deltas import CallDeltas, StreamedCall
from mlxd.engine.chat.partial_json import shown
from mlxd.engine.chat.reasoning import WHITESPACE, partial_tag_suffix
from mlxd.engine.chat.tool_types import ToolCallDelta, new_tool_call_id

_HEADER = re.compile(r"(?:<\|start\|>assistant)?(?P<head>.*?)<\|message\|>", re.S)
_ENDS = ("<|end|>", "<|return|>", "<|call|>")
_RECIPIENT = re.compile(r"to=functions\.([\w.-]+)")


@dataclass
class _Message:
    channel: str
    recipient: str | None
    body: str
    closed: bool


def _messages(text: str) -> list[_Message]:
    """The messages of ``text``; the last may be open (its body still being written)."""
    out: list[_Message] = []
    pos = 0
    while pos < len(text):
        header = _HEADER.match(text, pos)
        if header is None:
            break
        head = header.group("head")
        channel = re.search(r"<\|channel\|>(\w+)", head)
        recipient = _RECIPIENT.search(head)
        start = header.end()
        ends = [(text.find(e, start), e) for e in _ENDS]
        found = [(i, e) for i, e in ends if i >= 0]
        if not found:
            out.append(_Message(channel.group(1) if channel else "", recipient and recipient.group(1),
                                text[start:], False))
            break
        end, tag = min(found)
        out.append(_Message(channel.group(1) if channel else "", recipient and recipient.group(1),
                            text[start:end], True))
        pos = end + len(tag)
    return out


def _arguments(body: str) -> str | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return body.strip(WHITESPACE) if isinstance(value, dict) else None


class HarmonyStream:
    """Feed generated text deltas; get ``(reasoning, content, [ToolCallDelta])`` back."""

    def __init__(self, *, parse_tool_calls: bool = True, id_factory: Callable[[], str] = new_tool_call_id,
                 stream_arguments: bool = True) -> None:
        self._text = ""
        self._parse_tools = parse_tool_calls
        self._stream_arguments = stream_arguments
        self._reasoning = 0  # how much reasoning / content has been emitted
        self._content = 0
        self._deltas = CallDeltas(id_factory)
        self._calls: dict[int, StreamedCall] = {}  # by the index of the message that is the call

    @property
    def in_reasoning(self) -> bool:
        messages = _messages(self._text)
        return bool(messages) and not messages[-1].closed and messages[-1].channel == "analysis"

    def feed(self, delta: str) -> tuple[str, str, list[ToolCallDelta]]:
        self._text += delta
        return self._emit(final=False)

    def finish(self) -> tuple[str, str, list[ToolCallDelta]]:
        return self._emit(final=True)

    def _emit(self, *, final: bool) -> tuple[str, str, list[ToolCallDelta]]:
        reasoning: list[str] = []
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        messages = _messages(self._text)
        for at, message in enumerate(messages):
            body = message.body
            if not message.closed and not final:
                body = body[:len(body) - max(partial_tag_suffix(body, e) for e in _ENDS)]
            if message.recipient is not None and self._parse_tools:
                if message.closed or final:
                    arguments = _arguments(body)
                    if arguments is not None:
                        deltas += self._grow(at, message.recipient, arguments)
                        continue
                else:
                    written = body.lstrip(WHITESPACE)
                    if self._stream_arguments and written.startswith("{"):
                        deltas += self._grow(at, message.recipient, shown(written))
                    elif self._stream_arguments and not written:
                        deltas += self._grow(at, message.recipient, "{")  # llama-server shows "{" at once
                    continue  # the rest of a call is shown once whole
            (reasoning if message.channel == "analysis" else content).append(body)
        if not messages and final:
            content.append(self._text)  # no harmony header at all: the answer is plain content
        all_reasoning, all_content = "".join(reasoning), "".join(content)
        out_reasoning = all_reasoning[self._reasoning:]
        out_content = all_content[self._content:]
        self._reasoning, self._content = len(all_reasoning), len(all_content)
        return out_reasoning, out_content, deltas

    def _grow(self, at: int, name: str, arguments: str) -> list[ToolCallDelta]:
        """Announce the call that message ``at`` is, or add to its arguments."""
        call = self._calls.get(at)
        if call is None:
            self._calls[at] = call = self._deltas.new_call(name, arguments)
            return [call.first()]
        return call.grow(arguments)

"""gpt-oss answers (OpenAI's "harmony" channels): reasoning, content and tool calls, whole or as they stream.

After the generation prompt ``<|start|>assistant`` the model writes messages, each a header and a body (below, a
call's ``<|call|>`` is on a line of its own only to fit the page)::

    <|channel|>analysis<|message|>...reasoning...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
    <|call|>
    <|start|>assistant<|channel|>final<|message|>...the answer...<|return|>

The ``analysis`` channel is ``reasoning_content``, ``final`` (and a ``commentary`` preamble addressed to no tool)
is content, and a message addressed ``to=functions.NAME`` is a call of NAME with its body as JSON arguments (the
model's own text, as llama-server returns it); a call whose body is not a JSON object stays content (its body). A
whole text is read as one delta, so the stream's output equals the whole-text parse; a call's arguments stream as
they are written (engine.chat.call_deltas).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from mlxd.engine.chat.call_deltas import CallDeltas, StreamedCall, time_to_view
from mlxd.engine.chat.partial_json import shown
from mlxd.engine.chat.reasoning import WHITESPACE, partial_tag_suffix
from mlxd.engine.chat.tool_types import ToolCallDelta, new_tool_call_id

_START = "<|start|>assistant"
_MESSAGE = "<|message|>"
_ENDS = ("<|end|>", "<|return|>", "<|call|>")
_CHANNEL = re.compile(r"<\|channel\|>(\w+)")
_RECIPIENT = re.compile(r"to=functions\.([\w.-]+)")


def _arguments(body: str) -> str | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return body.strip(WHITESPACE) if isinstance(value, dict) else None


def _held(text: str, tags: tuple[str, ...]) -> int:
    """How much of the end of ``text`` may be the beginning of one of ``tags``."""
    return max(partial_tag_suffix(text, tag) for tag in tags)


class HarmonyStream:
    """Feed generated text deltas; get ``(reasoning, content, [ToolCallDelta])`` back.

    A state machine over the text as it comes: a header (up to ``<|message|>``), then a body (up to an end tag),
    then the next header. Only what a delta adds is read, with the end of the text that may begin a tag held back
    until the next delta settles it, so a long message (gpt-oss reasons for thousands of tokens in one) costs
    the event loop O(n) where re-reading the whole text at each delta cost O(n^2): at 32k four-character deltas
    of reasoning, 4 to 5 us a delta where it was 77. A call's arguments are shown as ``time_to_view`` paces them
    (5 us a delta at 32k, where it was 72)."""

    def __init__(self, *, parse_tool_calls: bool = True, id_factory: Callable[[], str] = new_tool_call_id,
                 stream_arguments: bool = True) -> None:
        self._parse_tools = parse_tool_calls
        self._stream_arguments = stream_arguments
        self._deltas = CallDeltas(id_factory)
        self._head: list[str] = []  # the header being written (all the text while no message has begun)
        self._in_body = False
        self._seen_message = False
        self._channel = ""
        self._recipient: str | None = None
        self._body: list[str] = []  # the open message's body, less ``_pending``
        self._body_len = 0
        self._pending = ""  # the end of the text read so far that may begin a tag
        self._call: StreamedCall | None = None  # the open message as an announced call
        self._viewed = 0  # the call body's length when its arguments were last shown

    @property
    def in_reasoning(self) -> bool:
        return self._in_body and self._channel == "analysis"

    def feed(self, delta: str) -> tuple[str, str, list[ToolCallDelta]]:
        out = _Out()
        text = self._pending + delta
        self._pending = ""
        while text:
            text = self._read_body(text, out) if self._in_body else self._read_head(text)
        if self._in_body:
            self._show(out)
        return out.result()

    def finish(self) -> tuple[str, str, list[ToolCallDelta]]:
        out = _Out()
        if self._in_body:
            self._add_body(self._pending)
            self._close(out)
        elif not self._seen_message:  # no harmony header at all: the answer is plain content
            out.content.append("".join(self._head) + self._pending)
        self._pending = ""
        return out.result()

    def _read_head(self, text: str) -> str:
        """Take header text; what follows ``<|message|>`` is returned to be read as the body."""
        at = text.find(_MESSAGE)
        if at < 0:
            hold = partial_tag_suffix(text, _MESSAGE)
            self._head.append(text[: len(text) - hold])
            self._pending = text[len(text) - hold:]
            return ""
        head = "".join(self._head) + text[:at]
        self._head = []
        head = head.removeprefix(_START)
        channel, recipient = _CHANNEL.search(head), _RECIPIENT.search(head)
        self._channel = channel.group(1) if channel else ""
        self._recipient = recipient.group(1) if recipient and self._parse_tools else None
        self._in_body = self._seen_message = True
        self._body, self._body_len, self._call, self._viewed = [], 0, None, 0
        return text[at + len(_MESSAGE):]

    def _read_body(self, text: str, out: _Out) -> str:
        """Take body text, up to and including the first end tag; the text after it is returned."""
        found = [(i, tag) for i, tag in ((text.find(tag), tag) for tag in _ENDS) if i >= 0]
        if not found:
            hold = _held(text, _ENDS)
            self._add_body(text[: len(text) - hold])
            self._pending = text[len(text) - hold:]
            return ""
        end, tag = min(found)
        self._add_body(text[:end])
        self._close(out)
        return text[end + len(tag):]

    def _add_body(self, text: str) -> None:
        if text:
            self._body.append(text)
            self._body_len += len(text)

    def _show(self, out: _Out) -> None:
        """Send what the open message's body adds: its text, or as a call, its arguments as far as written (a
        closed call's are sent whole by ``_close``)."""
        if self._recipient is None:
            (out.reasoning if self._channel == "analysis" else out.content).extend(self._body)
            self._body = []  # sent: only the length is kept
            return
        if not self._stream_arguments:
            return
        if self._call is not None and not time_to_view(self._body_len, self._viewed):
            return
        self._viewed = self._body_len
        written = "".join(self._body).lstrip(WHITESPACE)
        if written.startswith("{"):
            out.calls += self._grow(shown(written))
        elif not written:
            out.calls += self._grow("{")  # llama-server shows "{" at once

    def _close(self, out: _Out) -> None:
        """The open message ends: a call's whole arguments, or the rest of its text."""
        self._in_body = False
        if self._recipient is not None:
            body = "".join(self._body)
            arguments = _arguments(body)
            if arguments is not None:
                out.calls += self._grow(arguments)
                return
            self._recipient = None  # not a call after all: its body is text
            self._body = [body]
        self._show(out)

    def _grow(self, arguments: str) -> list[ToolCallDelta]:
        """Announce the open message's call, or add to its arguments."""
        assert self._recipient is not None
        if self._call is None:
            self._call = self._deltas.new_call(self._recipient, arguments)
            return [self._call.first()]
        return self._call.grow(arguments)


@dataclass
class _Out:
    """What one delta sends, in the order it is returned."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: list[ToolCallDelta] = field(default_factory=list)

    def result(self) -> tuple[str, str, list[ToolCallDelta]]:
        return "".join(self.reasoning), "".join(self.content), self.calls

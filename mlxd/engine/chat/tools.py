"""Tool calls in a model's answer, in its family's format (engine.chat.formats), whole or as it streams.

A call region runs from the format's opening marker to its closing one (Hermes: ``<tool_call>...</tool_call>``).
Text outside regions is content; whitespace that only separates content from a call belongs to the call's markup
and is dropped. A region that is not well-formed calls, or that is never closed, is not a call: it stays in the
content verbatim.

The streaming parser holds a region back until it closes, so it never announces a call it must retract, and each
call is announced whole (its id, name and complete arguments in one delta, which OpenAI clients accumulate as they
do pieces); the content it emits, and the calls, equal the whole-text parse for any cut of the text into deltas.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlxd.engine.chat.formats import FORMATS, HERMES, ToolFormat, Tools, detect_tool_format
from mlxd.engine.chat.reasoning import WHITESPACE, partial_tag_suffix

# A format's name in engine.chat.formats, or "llama3" (Llama 3.x's bare JSON answers, engine.chat.llama_tools).
ToolCallFormat = str

TOOL_CALL_OPEN = HERMES.start
TOOL_CALL_CLOSE = HERMES.end

_ID_ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase


def tool_call_format(template_source: str) -> ToolCallFormat:
    """How a model served with this template writes tool calls, as llama-server detects it from the template."""
    fmt = detect_tool_format(template_source)
    return "llama3" if fmt is None else fmt.name


def format_named(name: ToolCallFormat) -> ToolFormat:
    """The format of a name :func:`tool_call_format` gave (not "llama3", which has its own parser)."""
    return FORMATS[name]


def new_tool_call_id() -> str:
    """A tool-call id as llama-server makes them: 32 random letters and digits."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(32))


@dataclass(frozen=True)
class ToolCall:
    """One parsed call; ``arguments_json`` is the JSON text OpenAI's ``function.arguments`` carries."""

    id: str
    name: str
    arguments_json: str

    def to_openai(self) -> dict[str, Any]:
        """The entry of an OpenAI ``message.tool_calls`` list."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments_json}}


@dataclass(frozen=True)
class ToolCallDelta:
    """One streamed piece of a call, in OpenAI's ``delta.tool_calls`` shape."""

    index: int
    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The entry of an OpenAI streaming ``delta.tool_calls`` list."""
        return {
            "index": self.index,
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def _region_end(text: str, fmt: ToolFormat, searched: int, final: bool) -> tuple[int, int] | None:
    """``(body_end, region_end)`` of the region that opens ``text``, or None while it is still open.

    ``searched`` is how much of ``text`` is known to hold no closing marker: a long region arrives in many deltas,
    and only where a marker can newly be is searched.
    """
    marker = fmt.end or fmt.start
    body = max(len(fmt.start), searched - len(marker) + 1)
    if fmt.end:
        end = text.find(fmt.end, body)
        return None if end < 0 else (end, end + len(fmt.end))
    # No closing marker: the region runs to the next opening marker, or to the end of the answer.
    following = text.find(fmt.start, body)
    if following >= 0:
        return following, following
    return (len(text), len(text)) if final else None


def extract_tool_calls(
    text: str, *, fmt: ToolFormat = HERMES, tools: Tools = (), id_factory: Callable[[], str] = new_tool_call_id
) -> tuple[str, list[ToolCall]]:
    """Split a whole answer into its content and its tool calls."""
    stream = ToolCallStream(fmt=fmt, tools=tools, id_factory=id_factory)
    content, deltas = stream.feed(text)
    more, more_deltas = stream.finish()
    calls = [ToolCall(id=d.id, name=d.name, arguments_json=d.arguments) for d in deltas + more_deltas]
    return content + more, calls


class ToolCallStream:
    """Feed content deltas; get ``(content_delta, [ToolCallDelta])`` back."""

    _TEXT, _BLOCK, _AFTER_CALL = range(3)

    def __init__(self, *, fmt: ToolFormat = HERMES, tools: Tools = (),
                 id_factory: Callable[[], str] = new_tool_call_id) -> None:
        self._fmt = fmt
        self._tools = tools
        self._id_factory = id_factory
        self._state = self._TEXT
        self._held = ""  # undecided text: trailing whitespace, a partial marker, or an open region
        self._gap = ""  # whitespace before an open region, dropped if the region turns out to be calls
        self._count = 0
        self._searched = 0  # how much of a held region is known to hold no closing marker

    @property
    def in_tool_call(self) -> bool:
        """Whether a call region is open (its text is being held back)."""
        return self._state == self._BLOCK

    def feed(self, delta: str) -> tuple[str, list[ToolCallDelta]]:
        """Consume one content delta; return the content and the completed calls that can be shown now."""
        return self._advance(delta, final=False)

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """The end of the answer: an unclosed region is content after all (or calls, for a format without a
        closing marker)."""
        return self._advance("", final=True)

    def _advance(self, delta: str, *, final: bool) -> tuple[str, list[ToolCallDelta]]:
        fmt = self._fmt
        text = self._held + delta
        self._held = ""
        content: list[str] = []
        calls: list[ToolCallDelta] = []
        while True:
            if self._state == self._AFTER_CALL:
                text = text.lstrip(WHITESPACE)
                if not text:
                    break
                self._state = self._TEXT
            if self._state == self._TEXT:
                start = text.find(fmt.start)
                if start >= 0:
                    before = text[:start]
                    shown = before.rstrip(WHITESPACE)
                    content.append(shown)
                    self._gap = before[len(shown):]
                    self._state, text = self._BLOCK, text[start:]
                    continue
                if final:
                    content.append(text)
                    break
                cut = len(text) - partial_tag_suffix(text, fmt.start)
                shown = text[:cut].rstrip(WHITESPACE)
                content.append(shown)
                self._held = text[len(shown):]
                break
            ends = _region_end(text, fmt, self._searched, final)
            if ends is None:
                if final:
                    content.append(self._gap + text)
                    self._gap = ""
                else:
                    self._held = text
                    self._searched = len(text)
                break
            body_end, region_end = ends
            body = text[len(fmt.start):body_end]
            if not fmt.end:
                body = body.rstrip(WHITESPACE)
            parsed = fmt.calls(body, self._tools)
            if parsed is None:
                content.append(self._gap + text[:region_end])
                self._state = self._TEXT
            else:
                for name, arguments in parsed:
                    calls.append(ToolCallDelta(self._count, self._id_factory(), name, arguments))
                    self._count += 1
                self._state = self._AFTER_CALL
            self._gap = ""
            self._searched = 0
            text = text[region_end:]
        return "".join(content), calls

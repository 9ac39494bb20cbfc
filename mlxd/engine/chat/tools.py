"""Tool calls in a model's answer: the Hermes / Qwen form, whole or as it streams.

A call is ``<tool_call>{"name": "...", "arguments": {...}}</tool_call>``. Text outside calls is content;
whitespace that only separates content from a call belongs to the call's markup and is dropped. A block whose body
is not a JSON object naming a function, or that is never closed, is not a call: it stays in the content verbatim.

The streaming parser holds a call back until its closing tag, so it never announces a call it must retract; the
content it emits, and the calls, equal the whole-text parse for any cut of the text into deltas.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mlxd.engine.chat.reasoning import WHITESPACE, partial_tag_suffix

ToolCallFormat = Literal["hermes", "llama3"]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_ID_ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase


def tool_call_format(template_source: str) -> ToolCallFormat:
    """How a model served with this template writes tool calls: Llama 3.x's bare JSON, else Hermes tags."""
    llama = "<|start_header_id|>" in template_source and (
        "<|python_tag|>" in template_source or '"parameters"' in template_source)
    return "llama3" if llama and TOOL_CALL_OPEN not in template_source else "hermes"


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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_call_body(body: str) -> tuple[str, str] | None:
    """``(name, arguments_json)`` of a call's body, or None when it is not a well-formed call."""
    try:
        obj = json.loads(body, parse_constant=_reject_constant)
    except ValueError:  # JSONDecodeError is a ValueError, and so is a NaN
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    if isinstance(arguments, str):
        return name, arguments  # the model wrote the arguments already encoded
    return name, json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def extract_tool_calls(
    text: str, *, id_factory: Callable[[], str] = new_tool_call_id
) -> tuple[str, list[ToolCall]]:
    """Split a whole answer into its content and its tool calls."""
    content: list[str] = []
    calls: list[ToolCall] = []
    pos = 0
    after_call = False
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        end = text.find(TOOL_CALL_CLOSE, start + len(TOOL_CALL_OPEN)) if start >= 0 else -1
        if end < 0:
            tail = text[pos:]
            content.append(tail.lstrip(WHITESPACE) if after_call else tail)
            break
        before = text[pos:start]
        if after_call:
            before = before.lstrip(WHITESPACE)
        parsed = parse_call_body(text[start + len(TOOL_CALL_OPEN):end])
        block_end = end + len(TOOL_CALL_CLOSE)
        if parsed is None:
            content.append(before + text[start:block_end])
            after_call = False
        else:
            content.append(before.rstrip(WHITESPACE))
            calls.append(ToolCall(id=id_factory(), name=parsed[0], arguments_json=parsed[1]))
            after_call = True
        pos = block_end
    return "".join(content), calls


class ToolCallStream:
    """Feed content deltas; get ``(content_delta, [ToolCallDelta])`` back."""

    _TEXT, _BLOCK, _AFTER_CALL = range(3)

    def __init__(self, *, id_factory: Callable[[], str] = new_tool_call_id) -> None:
        self._id_factory = id_factory
        self._state = self._TEXT
        self._held = ""  # undecided text: trailing whitespace, a partial tag, or an open block
        self._gap = ""  # whitespace before an open block, dropped if the block turns out to be a call
        self._count = 0
        self._searched = 0  # how much of a held block is known to hold no closing tag

    @property
    def in_tool_call(self) -> bool:
        """Whether a ``<tool_call>`` block is open (its text is being held back)."""
        return self._state == self._BLOCK

    def feed(self, delta: str) -> tuple[str, list[ToolCallDelta]]:
        """Consume one content delta; return the content and the completed calls that can be shown now."""
        return self._advance(delta, final=False)

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """The end of the answer: an unclosed block is content after all."""
        return self._advance("", final=True)

    def _advance(self, delta: str, *, final: bool) -> tuple[str, list[ToolCallDelta]]:
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
                start = text.find(TOOL_CALL_OPEN)
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
                cut = len(text) - partial_tag_suffix(text, TOOL_CALL_OPEN)
                shown = text[:cut].rstrip(WHITESPACE)
                content.append(shown)
                self._held = text[len(shown):]
                break
            # A long block arrives in many deltas: search only where a closing tag can newly be.
            end = text.find(TOOL_CALL_CLOSE, max(len(TOOL_CALL_OPEN), self._searched - len(TOOL_CALL_CLOSE) + 1))
            if end < 0:
                if final:
                    content.append(self._gap + text)
                    self._gap = ""
                else:
                    self._held = text
                    self._searched = len(text)
                break
            block_end = end + len(TOOL_CALL_CLOSE)
            parsed = parse_call_body(text[len(TOOL_CALL_OPEN):end])
            if parsed is None:
                content.append(self._gap + text[:block_end])
                self._state = self._TEXT
            else:
                calls.append(ToolCallDelta(self._count, self._id_factory(), parsed[0], parsed[1]))
                self._count += 1
                self._state = self._AFTER_CALL
            self._gap = ""
            self._searched = 0
            text = text[block_end:]
        return "".join(content), calls

"""Tool calls in a model's answer, in its family's format (engine.chat.formats), whole or as it streams.

A call region runs from the format's opening marker to its closing one (Hermes: ``<tool_call>...</tool_call>``).
Text outside regions is content; whitespace that only separates content from a call belongs to the call's markup
and is dropped. A region that is not well-formed calls, or that is never closed, is not a call: it stays in the
content verbatim.

The streaming parser holds a region's text back, and streams its calls as llama-server does (engine.chat.call_deltas):
a call is announced once its name is written, and its arguments follow piece by piece as the model writes them.
The content it emits, and the calls, equal the whole-text parse for any cut of the text into deltas, except for a
region that turns out not to be calls after one was announced: its text is content as in the whole parse, and the
announced call stays (a stream cannot take it back).
"""

from __future__ import annotations

from collections.abc import Callable

from mlxd.engine.chat.call_deltas import CallDeltas, time_to_view
from mlxd.engine.chat.formats import FORMATS, HERMES, ToolFormat, Tools
from mlxd.engine.chat.tool_detect import detect_tool_format
from mlxd.engine.chat.reasoning import WHITESPACE, partial_tag_suffix
from mlxd.engine.chat.tool_types import ToolCall, ToolCallDelta, new_tool_call_id

__all__ = ["TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "ToolCall", "ToolCallDelta", "ToolCallFormat", "ToolCallStream",
           "extract_tool_calls", "format_named", "new_tool_call_id", "tool_call_format"]

# A format's name in engine.chat.formats, or "llama3" (Llama 3.x's bare JSON answers, engine.chat.llama_tools).
ToolCallFormat = str

TOOL_CALL_OPEN = HERMES.start
TOOL_CALL_CLOSE = HERMES.end

def tool_call_format(template_source: str) -> ToolCallFormat:
    """How a model served with this template writes tool calls, as llama-server detects it from the template."""
    fmt = detect_tool_format(template_source)
    return "llama3" if fmt is None else fmt.name


def format_named(name: ToolCallFormat) -> ToolFormat:
    """The format of a name :func:`tool_call_format` gave (not "llama3", which has its own parser)."""
    return FORMATS[name]


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
    stream = ToolCallStream(fmt=fmt, tools=tools, id_factory=id_factory, stream_arguments=False)
    content, deltas = stream.feed(text)
    more, more_deltas = stream.finish()
    calls = [ToolCall(id=d.id, name=d.name, arguments_json=d.arguments) for d in deltas + more_deltas]
    return content + more, calls


class ToolCallStream:
    """Feed content deltas; get ``(content_delta, [ToolCallDelta])`` back."""

    _TEXT, _BLOCK, _AFTER_CALL = range(3)

    def __init__(self, *, fmt: ToolFormat = HERMES, tools: Tools = (),
                 id_factory: Callable[[], str] = new_tool_call_id, stream_arguments: bool = True) -> None:
        self._fmt = fmt
        self._tools = tools
        self._calls = CallDeltas(id_factory)
        self._stream_arguments = stream_arguments  # False: each call is shown once whole (a whole-text parse)
        self._state = self._TEXT
        self._held = ""  # undecided text: trailing whitespace, a partial marker, or an open region
        self._gap = ""  # whitespace before an open region, dropped if the region turns out to be calls
        self._searched = 0  # how much of a held region is known to hold no closing marker
        self._viewed = 0  # how much of the held region its last view read

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
                    self._calls.abandon()
                else:
                    self._held = text
                    self._searched = len(text)
                    if self._stream_arguments and time_to_view(len(text), self._viewed):
                        self._viewed = len(text)
                        body = text[len(fmt.start):]
                        calls += self._calls.view(fmt.view(body, self._tools), fmt.ids(body) if fmt.ids else ())
                break
            body_end, region_end = ends
            body = text[len(fmt.start):body_end]
            if not fmt.end:
                body = body.rstrip(WHITESPACE)
            parsed = fmt.calls(body, self._tools)
            if parsed is None:
                content.append(self._gap + text[:region_end])
                self._calls.abandon()
                self._state = self._TEXT
            else:
                calls += self._calls.close(parsed, fmt.ids(body) if fmt.ids else ())
                self._state = self._AFTER_CALL
            self._gap = ""
            self._searched = 0
            self._viewed = 0
            text = text[region_end:]
        return "".join(content), calls

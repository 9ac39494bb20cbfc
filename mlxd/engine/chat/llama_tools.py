"""Tool calls as Llama 3.x models write them: the whole answer is one JSON object naming a function.

``{"name": "get_weather", "parameters": {"city": "Paris"}}``, optionally after ``<|python_tag|>``, and several
calls may be separated by ``;``. An answer that is not entirely such calls is content, verbatim. The streaming
parser shows ordinary text at once, and holds back an answer that opens like a call until the end, streaming its
calls as they are written (engine.chat.call_deltas); arguments are the model's own JSON text, as llama-server
returns them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from mlxd.engine.chat.call_deltas import CallDeltas, CallView, time_to_view
from mlxd.engine.chat.partial_calls import object_call
from mlxd.engine.chat.partial_json import skip_ws, value_end
from mlxd.engine.chat.reasoning import WHITESPACE
from mlxd.engine.chat.tool_types import ToolCall, ToolCallDelta, new_tool_call_id

PYTHON_TAG = "<|python_tag|>"
_ARGUMENT_KEYS = ("parameters", "arguments")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _body(text: str) -> str:
    body = text.lstrip(WHITESPACE)
    return body[len(PYTHON_TAG):].lstrip(WHITESPACE) if body.startswith(PYTHON_TAG) else body


def _calls_in(text: str) -> list[tuple[str, str]] | None:
    """The ``(name, arguments_json)`` calls that make up the whole of ``text``, or None."""
    body = _body(text).rstrip(WHITESPACE)
    calls: list[tuple[str, str]] = []
    pos = 0
    while True:
        try:
            obj, end = _DECODER.raw_decode(body, pos)
        except ValueError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            return None
        arguments = obj["parameters"] if "parameters" in obj else obj.get("arguments", {})
        written = object_call(body[:end], pos, "name", _ARGUMENT_KEYS)
        if written is not None and written[1] and isinstance(arguments, dict):
            calls.append((obj["name"], written[1]))  # as the model wrote it
        elif isinstance(arguments, str):
            calls.append((obj["name"], arguments))
        else:
            calls.append((obj["name"], json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))))
        rest = body[end:].lstrip(WHITESPACE)
        if not rest:
            return calls
        if not rest.startswith(";"):
            return None
        pos = len(body) - len(rest[1:].lstrip(WHITESPACE))
        if pos == len(body):
            return calls


def _view(text: str) -> list[CallView]:
    """The calls of an answer being written, as far as their names are."""
    body = _body(text)
    calls: list[CallView] = []
    pos = 0
    while pos < len(body) and (call := object_call(body, pos, "name", _ARGUMENT_KEYS)) is not None:
        calls.append(call)
        end = value_end(body, pos)
        if end is None:
            break
        pos = skip_ws(body, end)
        if not body.startswith(";", pos):
            break
        pos = skip_ws(body, pos + 1)
    return calls


def extract_llama_tool_calls(
    text: str, *, id_factory: Callable[[], str] = new_tool_call_id
) -> tuple[str, list[ToolCall]]:
    """Split a whole answer into its content and its tool calls."""
    found = _calls_in(text)
    if found is None:
        return text, []
    return "", [ToolCall(id=id_factory(), name=name, arguments_json=arguments) for name, arguments in found]


def _may_open_a_call(text: str) -> bool:
    start = text.lstrip(WHITESPACE)
    if start.startswith(PYTHON_TAG):
        start = start[len(PYTHON_TAG):].lstrip(WHITESPACE)
    return start == "" or start.startswith("{") or PYTHON_TAG.startswith(start)


class LlamaToolCallStream:
    """Feed content deltas; get ``(content_delta, [ToolCallDelta])`` back, as :class:`ToolCallStream` does."""

    def __init__(self, *, id_factory: Callable[[], str] = new_tool_call_id, stream_arguments: bool = True) -> None:
        self._calls = CallDeltas(id_factory)
        self._stream_arguments = stream_arguments
        self._held: str | None = ""  # None once the answer is known to be plain content
        self._viewed = 0  # how much of the held answer its last view read

    @property
    def in_tool_call(self) -> bool:
        return bool(self._held)

    def feed(self, delta: str) -> tuple[str, list[ToolCallDelta]]:
        """Consume one content delta."""
        if self._held is None:
            return delta, []
        text = self._held + delta
        if _may_open_a_call(text):
            self._held = text
            if not self._stream_arguments or not time_to_view(len(text), self._viewed):
                return "", []
            self._viewed = len(text)
            return "", self._calls.view(_view(text))
        self._held = None
        return text, []

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """The end of the answer: a held answer is calls if it parses whole, content otherwise."""
        text, self._held = self._held or "", None
        found = _calls_in(text)
        if found is None:
            self._calls.abandon()
            return text, []
        return "", self._calls.close(found)

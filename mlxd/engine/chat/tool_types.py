"""A parsed tool call, whole or as one streamed delta, in OpenAI's shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxd.ids import alphanumeric


def new_tool_call_id() -> str:
    """A tool-call id as llama-server makes them: 32 random letters and digits."""
    return alphanumeric(32)


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
    """One streamed piece of call ``index``: the first carries its ``id`` and ``name`` (and the arguments written so
    far), the others only a piece of ``arguments`` (``id`` and ``name`` empty)."""

    index: int
    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The entry of an OpenAI streaming ``delta.tool_calls`` list, with llama-server's keys: ``id``, ``type``
        and ``function.name`` on the first delta only, ``function.arguments`` when not empty."""
        entry: dict[str, Any] = {"index": self.index}
        function: dict[str, Any] = {}
        if self.id:
            entry["id"] = self.id
            entry["type"] = "function"
        if self.name:
            function["name"] = self.name
        if self.arguments:
            function["arguments"] = self.arguments
        if function:
            entry["function"] = function
        return entry

"""The assistant message as the chat renderers see it: content, reasoning and tool calls, whole or as diffs.

The engine's chat parser splits generated text; the renderers of every chat-shaped API (OpenAI chat, Responses,
Anthropic) work from these two small types, so each wire format is shaped from the same facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCallOut:
    """A parsed tool call: ``arguments`` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class MessageDiff:
    """What one step of generation added: text, reasoning, or a piece of tool call ``tool_index``."""

    content: str = ""
    reasoning: str = ""
    tool_index: int | None = None
    tool_id: str = ""  # set on the first diff of a tool call, with its name
    tool_name: str = ""
    tool_arguments: str = ""


@dataclass
class AssistantMessage:
    """The whole assistant message once generation ended."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallOut] = field(default_factory=list)


def finish_reason(stop_type: str, has_tool_calls: bool) -> str:
    """OpenAI's finish_reason from llama-server's stop type."""
    if stop_type in ("eos", "word"):
        return "tool_calls" if has_tool_calls else "stop"
    return "length"

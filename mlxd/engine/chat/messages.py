"""OpenAI-shaped chat messages and tools, turned into what chat templates expect (llama-server's conversions)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mlxd.engine.chat.caps import TemplateCaps
from mlxd.engine.chat.errors import ChatRequestError

# Shaping for a template not probed: string content, a system role, arguments as objects.
OBJECT_ARGUMENTS = TemplateCaps(supports_object_arguments=True)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def content_parts_text(content: Any, separator: str) -> str:
    """The text of a message's content: a string, null, or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatRequestError("Expected 'content' to be a string or an array")
    texts: list[str] = []
    for part in content:
        if not isinstance(part, Mapping) or "type" not in part:
            raise ChatRequestError(f"Missing content part type: {_dump(part)}")
        if part["type"] != "text":
            raise ChatRequestError("unsupported content[].type")
        text = part.get("text")
        if not isinstance(text, str):
            raise ChatRequestError(f"Missing content part text: {_dump(part)}")
        texts.append(text)
    return separator.join(texts)


def _tool_call(call: Any, object_arguments: bool) -> dict[str, Any]:
    if not isinstance(call, Mapping) or "type" not in call:
        raise ChatRequestError(f"Missing tool call type: {_dump(call)}")
    if call["type"] != "function":
        raise ChatRequestError(f"Unsupported tool call type: {_dump(call)}")
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise ChatRequestError(f"Missing tool call function: {_dump(call)}")
    name = function.get("name")
    if not isinstance(name, str):
        raise ChatRequestError(f"Missing tool call name: {_dump(call)}")
    arguments = function.get("arguments", {})
    # A template that can take arguments as an object (Llama 3 dumps them with tojson, Qwen checks `is string`)
    # gets the object a JSON string encodes; any other gets the JSON text, as llama-server shapes them.
    if object_arguments and isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ChatRequestError(f"Failed to parse tool call arguments as JSON: {exc}") from exc
    elif not object_arguments and not isinstance(arguments, str):
        arguments = _dump(arguments)
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def _content(content: Any, caps: TemplateCaps) -> str | list[dict[str, str]]:
    """Content as the template reads it: parts kept for a template that takes them, joined text otherwise."""
    text = content_parts_text(content, "\n")  # validates the parts
    if isinstance(content, list) and caps.supports_typed_content:
        return [{"type": "text", "text": part["text"]} for part in content]
    if not caps.supports_string_content and caps.supports_typed_content:
        return [{"type": "text", "text": text}]
    return text


def _merge_system_prompt(messages: list[dict[str, Any]]) -> None:
    """For a template without a system role: the system prompt opens the next message, or is dropped."""
    if not messages or messages[0]["role"] != "system":
        return
    system = messages.pop(0)
    if messages:
        first = messages[0]
        first["content"] = content_parts_text(system["content"], "\n") + "\n" + content_parts_text(
            first["content"], "\n")


def template_messages(
    messages: Any, *, caps: TemplateCaps = OBJECT_ARGUMENTS, map_developer_to_system: bool = True
) -> list[dict[str, Any]]:
    """Validate OpenAI chat messages and give each the shape the template reads (``caps``), as llama-server does.

    Text parts are joined with newlines unless the template takes typed content; tool-call arguments are objects
    when the template takes them so; a null content beside tool calls becomes ``""``; ``developer`` becomes
    ``system`` unless the template speaks that role; a system prompt the template cannot place opens the next
    message.
    """
    if not isinstance(messages, list):
        raise ChatRequestError("Expected 'messages' to be an array")
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise ChatRequestError(f"Expected 'message' to be an object, got {_dump(message)}")
        role = message.get("role")
        if not isinstance(role, str):
            raise ChatRequestError(f"Missing 'role' in message: {_dump(message)}")
        has_content = "content" in message
        tool_calls = message.get("tool_calls")
        if role == "assistant":
            if not has_content and tool_calls is None:
                raise ChatRequestError("Assistant message must contain either 'content' or 'tool_calls'!")
        elif not has_content:
            raise ChatRequestError("All non-assistant messages must contain 'content'")

        entry: dict[str, Any] = {
            "role": "system" if role == "developer" and map_developer_to_system else role,
            "content": _content(message.get("content"), caps),
        }
        if tool_calls is not None:
            if not isinstance(tool_calls, list):
                raise ChatRequestError("Expected 'tool_calls' to be an array")
            if tool_calls:
                entry["tool_calls"] = [_tool_call(call, caps.supports_object_arguments) for call in tool_calls]
        for key in ("reasoning_content", "name", "tool_call_id"):
            value = message.get(key)
            if isinstance(value, str) and value:
                entry[key] = value
            elif value is not None and not isinstance(value, str):
                raise ChatRequestError(f"Expected '{key}' to be a string")
        out.append(entry)
    if not caps.supports_system_role:
        _merge_system_prompt(out)
    return out


def template_tools(tools: Any) -> list[dict[str, Any]]:
    """Validate OpenAI ``tools`` and normalise each to ``{type, function: {name, description, parameters}}``."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ChatRequestError(f"Failed to parse tools: Expected 'tools' to be an array, got {_dump(tools)}")
    out: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, Mapping) or "type" not in tool:
            raise ChatRequestError(f"Failed to parse tools: Missing tool type: {_dump(tool)}")
        if tool["type"] != "function":
            raise ChatRequestError(f"Failed to parse tools: Unsupported tool type: {_dump(tool)}")
        function = tool.get("function")
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ChatRequestError(f"Failed to parse tools: Missing tool function: {_dump(tool)}")
        description = function.get("description", "")
        parameters = function.get("parameters", {})
        if not isinstance(description, str) or not isinstance(parameters, Mapping):
            raise ChatRequestError(f"Failed to parse tools: bad description or parameters: {_dump(tool)}")
        out.append({
            "type": "function",
            "function": {"name": function["name"], "description": description, "parameters": dict(parameters)},
        })
    return out


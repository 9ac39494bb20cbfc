"""OpenAI-shaped chat messages and tools, turned into what chat templates expect (llama-server's conversions)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mlxd.engine.chat.errors import ChatRequestError


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


def _tool_call(call: Any) -> dict[str, Any]:
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
    # Templates index into arguments (Llama 3 dumps them with tojson, Qwen checks `is string`): a JSON string
    # becomes the object it encodes, as llama-server does before rendering.
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ChatRequestError(f"Failed to parse tool call arguments as JSON: {exc}") from exc
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def template_messages(messages: Any, *, map_developer_to_system: bool = True) -> list[dict[str, Any]]:
    """Validate OpenAI chat messages and give each the shape templates read.

    Content parts are joined with newlines into one string; tool-call arguments become objects; a null content
    beside tool calls becomes ``""``; ``developer`` becomes ``system`` unless the template speaks that role.
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
            "content": content_parts_text(message.get("content"), "\n"),
        }
        if tool_calls is not None:
            if not isinstance(tool_calls, list):
                raise ChatRequestError("Expected 'tool_calls' to be an array")
            if tool_calls:
                entry["tool_calls"] = [_tool_call(call) for call in tool_calls]
        for key in ("reasoning_content", "name", "tool_call_id"):
            value = message.get(key)
            if isinstance(value, str) and value:
                entry[key] = value
            elif value is not None and not isinstance(value, str):
                raise ChatRequestError(f"Expected '{key}' to be a string")
        out.append(entry)
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


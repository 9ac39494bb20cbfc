"""The Anthropic Messages request, and its translation into an OpenAI chat request (as b10621 translates it)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt

from mlxd.errors import InvalidRequest


class MessagesRequest(BaseModel):
    """``POST /v1/messages`` and ``/v1/messages/count_tokens``; unknown keys pass through to the chat request."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    max_tokens: StrictInt | None = None
    stream: StrictBool = False
    stop_sequences: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


def _text_of(blocks: Any) -> str:
    if isinstance(blocks, str):
        return blocks
    parts = []
    for block in blocks or []:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def _tool_result(blocks: Any) -> str | list[dict[str, Any]]:
    """A tool result's content: its text, or, when it holds images, text and image parts (as b10621 converts them,
    so that an image is refused or seen, never silently dropped)."""
    if isinstance(blocks, list) and any(isinstance(b, dict) and b.get("type") == "image" for b in blocks):
        parts: list[dict[str, Any]] = []
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "image":
                parts.append({"type": "image_url", "image_url": block.get("source", {})})
            elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append({"type": "text", "text": block["text"]})
        return parts
    return _text_of(blocks)


def _message(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as OpenAI messages: tool results become ``tool`` messages, tool_use become calls."""
    role = message.get("role")
    content = message.get("content")
    if not isinstance(role, str):
        raise InvalidRequest("Missing 'role' in message")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise InvalidRequest("Expected 'content' to be a string or an array")
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning = ""
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": block.get("source", {})})
        elif kind == "document":
            parts.append({"type": "input_file"})
        elif kind == "thinking":
            reasoning += str(block.get("thinking", ""))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": {
                "name": str(block.get("name", "")),
                "arguments": json.dumps(block.get("input", {}), ensure_ascii=False, separators=(",", ":"))}})
        elif kind == "tool_result":
            out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")),
                        "content": _tool_result(block.get("content", ""))})
        else:
            raise InvalidRequest(f"unsupported content block type: {kind!r}")
    if parts or calls or reasoning or not out:
        entry: dict[str, Any] = {"role": role, "content": parts}
        if calls:
            entry["tool_calls"] = calls
        if reasoning:
            entry["reasoning_content"] = reasoning
        out.insert(0, entry) if role != "user" else out.append(entry)
    return out


def to_chat(req: MessagesRequest) -> dict[str, Any]:
    """The equivalent OpenAI chat request body."""
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": _text_of(req.system)})
    for message in req.messages:
        messages += _message(message)
    body: dict[str, Any] = {k: v for k, v in (req.model_extra or {}).items()}
    body["messages"] = messages
    body["stream"] = req.stream
    if req.max_tokens is not None:
        body["n_predict"] = req.max_tokens
    if req.stop_sequences:
        body["stop"] = req.stop_sequences
    if req.tools:
        body["tools"] = [{"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("input_schema", {})}} for t in req.tools]
    if req.tool_choice:
        kind = req.tool_choice.get("type")
        if kind == "tool" and isinstance(req.tool_choice.get("name"), str):
            body["tool_choice"] = {"type": "function", "function": {"name": req.tool_choice["name"]}}
        else:
            body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind), "auto")
    if req.thinking is not None:
        enabled = req.thinking.get("type") == "enabled"
        kwargs = dict(body.get("chat_template_kwargs") or {})
        kwargs.setdefault("enable_thinking", enabled)
        body["chat_template_kwargs"] = kwargs
    return body

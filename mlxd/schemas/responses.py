"""The OpenAI Responses request, and its translation into an OpenAI chat request (as b10621 translates it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt

from mlxd.errors import InvalidRequest


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``; unknown keys pass through to the chat request."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: StrictInt | None = None
    stream: StrictBool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    previous_response_id: str | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    store: bool | None = None


_PART_TYPES = {"input_text": "text", "output_text": "text", "text": "text", "input_image": "image_url",
               "input_file": "input_file", "input_audio": "input_audio"}


def _content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest("Expected 'content' to be a string or an array")
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        mapped = _PART_TYPES.get(str(kind))
        if mapped is None:
            raise InvalidRequest(f"unsupported content part type: {kind!r}")
        # Media parts keep their data (input_image's image_url string, input_audio's object) for api.media_parts.
        parts.append({"type": "text", "text": str(part.get("text", ""))} if mapped == "text"
                     else {**part, "type": mapped})
    return parts


def _messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str):
                raise InvalidRequest("Missing 'role' in input item")
            out.append({"role": role, "content": _content(item.get("content", ""))})
        elif kind == "function_call":
            call_id = str(item.get("call_id", ""))
            call = {"id": call_id.removeprefix("fc_"), "type": "function",
                    "function": {"name": str(item.get("name", "")), "arguments": str(item.get("arguments", "{}"))}}
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output", "")
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")).removeprefix("fc_"),
                        "content": output if isinstance(output, str) else str(output)})
        elif kind == "reasoning":
            continue
        else:
            raise InvalidRequest(f"unsupported input item type: {kind!r}")
    return out


def to_chat(req: ResponsesRequest) -> dict[str, Any]:
    """The equivalent OpenAI chat request body."""
    if req.previous_response_id is not None:
        raise InvalidRequest("'previous_response_id' is not supported: responses are not stored; send the whole "
                             "conversation in 'input'")
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        messages.append({"role": "user", "content": req.input})
    else:
        messages += _messages(req.input)
    body: dict[str, Any] = dict(req.model_extra or {})
    body["messages"] = messages
    body["stream"] = req.stream
    if req.max_output_tokens is not None:
        body["n_predict"] = req.max_output_tokens
    if req.tools:
        tools = []
        for tool in req.tools:
            if tool.get("type") != "function":
                raise InvalidRequest(f"unsupported tool type: {tool.get('type')!r}")
            tools.append({"type": "function", "function": {
                "name": tool.get("name"), "description": tool.get("description", ""),
                "parameters": tool.get("parameters", {})}})
        body["tools"] = tools
    choice = req.tool_choice
    if isinstance(choice, str):
        body["tool_choice"] = choice
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    fmt = (req.text or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt.get("schema", {})}}
    elif isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        body["response_format"] = fmt
    return body

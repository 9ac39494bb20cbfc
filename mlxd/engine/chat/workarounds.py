"""Message reshaping llama-server applies for particular templates before rendering them (common/chat.cpp).

Two families' templates read the conversation in a shape of their own: Ministral 3 / Devstral (reasoning and
text as typed blocks of system and assistant messages) and the first Gemma 4 templates (tool results inside the
assistant turn that called the tools). Each is recognised by the same telltale text llama-server looks for.
"""

from __future__ import annotations

import json
from typing import Any


def is_ministral_3(source: str) -> bool:
    """Ministral 3 and Devstral: [TOOL_CALLS] with [ARGS] and without Mistral Small 3.2's [CALL_ID]."""
    return all(t in source for t in ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")) and "[CALL_ID]" not in source


def is_old_gemma_4(source: str) -> bool:
    """A Gemma 4 template from before Google's OpenAI-style one, which takes tool results inside the model turn."""
    return "'<|tool_call>call:'" in source and "{#- OpenAI Chat Completions:" not in source


def ministral_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System and assistant messages as typed blocks: a ``thinking`` block for reasoning, then the text."""
    out = []
    for message in messages:
        if message["role"] not in ("system", "assistant"):
            out.append(message)
            continue
        blocks: list[dict[str, Any]] = []
        if isinstance(message.get("reasoning_content"), str):
            blocks.append({"type": "thinking", "thinking": message["reasoning_content"]})
        content = message.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
        adjusted = {k: v for k, v in message.items() if k != "reasoning_content"}
        adjusted["content"] = blocks
        out.append(adjusted)
    return out


def _tool_response(message: dict[str, Any], name: str) -> dict[str, Any]:
    content = message.get("content")
    response: Any = content
    if isinstance(content, str):
        try:
            response = json.loads(content)
        except json.JSONDecodeError:
            response = content
    return {"name": name or message.get("tool_call_id", ""), "response": response}


def gemma_4_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant turn with tool calls takes the tool results that follow it, and the final answer after them."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if message["role"] != "assistant" or not message.get("tool_calls"):
            out.append(message)
            i += 1
            continue
        calls = list(message["tool_calls"])
        turn: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
        responses: list[dict[str, Any]] = []
        i += 1
        while i < len(messages) and messages[i]["role"] == "tool":
            call = calls[len(responses)] if len(responses) < len(calls) else {}
            responses.append(_tool_response(messages[i], call.get("function", {}).get("name", "")))
            i += 1
        if responses:
            turn["tool_responses"] = responses
        following = messages[i] if i < len(messages) else None
        if following is not None and following["role"] == "assistant" and not following.get("tool_calls") \
                and following.get("content"):
            turn["content"] = following["content"]
            i += 1
        if isinstance(message.get("reasoning_content"), str):
            turn["reasoning_content"] = message["reasoning_content"]
        out.append(turn)
    return out


def reshape(source: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages in the shape this template's family reads, as llama-server gives them to it."""
    if is_ministral_3(source):
        return ministral_blocks(messages)
    if is_old_gemma_4(source):
        return gemma_4_turns(messages)
    return messages

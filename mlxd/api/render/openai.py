"""OpenAI-compatible objects as b10621 shapes them: text completions, chat completions, and their stream chunks."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mlxd.api.render.message import AssistantMessage, MessageDiff, finish_reason
from mlxd.api.render.native import timings_out, token_probability
from mlxd.engine import FinalEvent, Timings, TokenEvent
from mlxd.ids import alphanumeric
from mlxd.json_out import SLOT, template


def random_id(prefix: str = "chatcmpl-", length: int = 32) -> str:
    """An id like b10621's (``chatcmpl-`` and 32 alphanumerics)."""
    return prefix + alphanumeric(length)


class Envelope:
    """The fields every object of one response shares: id, model, fingerprint, creation time."""

    def __init__(self, model: str, fingerprint: str, cmpl_id: str | None = None) -> None:
        self.id = cmpl_id or random_id()
        self.model = model
        self.fingerprint = fingerprint
        self.created = int(time.time())


def usage(n_prompt: int, n_decoded: int, n_cached: int) -> dict[str, Any]:
    return {
        "completion_tokens": n_decoded,
        "prompt_tokens": n_prompt,
        "total_tokens": n_prompt + n_decoded,
        "prompt_tokens_details": {"cached_tokens": n_cached},
    }


def logprobs_content(events: Sequence[TokenEvent], post_sampling: bool) -> dict[str, Any] | None:
    items = [token_probability(ev, post_sampling) for ev in events]
    content = [i.model_dump(exclude_unset=True) for i in items if i is not None]
    return {"content": content} if content else None


# ---- /v1/completions ---------------------------------------------------------------------------------------------


def text_choice(text: str, index: int, logprobs: dict[str, Any] | None, reason: str | None) -> dict[str, Any]:
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": reason}


def text_completion(env: Envelope, choices: list[dict[str, Any]], use: dict[str, Any], timings: Timings | None,
                    verbose: dict[str, Any] | None = None) -> dict[str, Any]:
    """A whole ``text_completion`` object (also the last chunk of a stream, with empty text)."""
    return _whole("text_completion", env, choices, use, timings, verbose)


def _whole(kind: str, env: Envelope, choices: list[dict[str, Any]], use: dict[str, Any], timings: Timings | None,
           verbose: dict[str, Any] | None) -> dict[str, Any]:
    """A whole completion object of ``kind``, keys in b10621's order; ``__verbose`` and ``timings`` when given."""
    out: dict[str, Any] = {
        "choices": choices,
        "created": env.created,
        "model": env.model,
        "system_fingerprint": env.fingerprint,
        "object": kind,
        "usage": use,
        "id": env.id,
    }
    if verbose is not None:
        out["__verbose"] = verbose
    if timings is not None:
        out["timings"] = timings_out(timings).model_dump()
    return out


def text_chunk(env: Envelope, choice: dict[str, Any], timings: Timings | None = None,
               progress: dict[str, int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "choices": [choice],
        "created": env.created,
        "model": env.model,
        "system_fingerprint": env.fingerprint,
        "object": "text_completion",
        "id": env.id,
    }
    if timings is not None:
        out["timings"] = timings_out(timings).model_dump()
    if progress is not None:
        out["prompt_progress"] = progress
    return out


def text_chunk_template(env: Envelope, index: int) -> Callable[[str], str]:
    """The JSON of ``text_chunk`` for a plain piece of text (no logprobs, no timings), as a function of the text."""
    return template(text_chunk(env, text_choice(SLOT, index, None, None)))


# ---- /v1/chat/completions ----------------------------------------------------------------------------------------


def message_json(msg: AssistantMessage) -> dict[str, Any]:
    """The assistant message object: content (null beside tool calls), reasoning_content, tool_calls."""
    out: dict[str, Any] = {"role": "assistant"}
    out["content"] = None if (not msg.content and msg.tool_calls) else msg.content
    if msg.reasoning:
        out["reasoning_content"] = msg.reasoning
    if msg.tool_calls:
        out["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}, "id": c.id}
            for c in msg.tool_calls
        ]
    return out


def chat_choice(msg: AssistantMessage, final: FinalEvent, index: int,
                logprobs: dict[str, Any] | None) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "finish_reason": finish_reason(final.stop_type, bool(msg.tool_calls)),
        "index": index,
        "message": message_json(msg),
    }
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return choice


def chat_completion(env: Envelope, choices: list[dict[str, Any]], use: dict[str, Any], timings: Timings | None,
                    verbose: dict[str, Any] | None = None) -> dict[str, Any]:
    """A whole ``chat.completion`` object."""
    return _whole("chat.completion", env, choices, use, timings, verbose)


def delta_json(diff: MessageDiff) -> dict[str, Any]:
    """The ``delta`` of one chat chunk."""
    if diff.tool_index is not None:
        call: dict[str, Any] = {"index": diff.tool_index}
        if diff.tool_name:
            call["id"] = diff.tool_id
            call["type"] = "function"
            call["function"] = {"name": diff.tool_name}
            if diff.tool_arguments:  # llama-server leaves out an empty arguments piece
                call["function"]["arguments"] = diff.tool_arguments
        else:
            call["function"] = {"arguments": diff.tool_arguments}
        return {"tool_calls": [call]}
    if diff.reasoning:
        return {"reasoning_content": diff.reasoning}
    return {"content": diff.content}


def chat_chunk(env: Envelope, index: int, delta: dict[str, Any], reason: str | None = None,
               logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"finish_reason": reason, "index": index, "delta": delta}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {
        "choices": [choice],
        "created": env.created,
        "id": env.id,
        "model": env.model,
        "system_fingerprint": env.fingerprint,
        "object": "chat.completion.chunk",
    }


def chat_delta_template(env: Envelope, index: int, field: str) -> Callable[[str], str]:
    """The JSON of ``chat_chunk`` whose delta is one text ``field`` (``content``, ``reasoning_content``), as a
    function of the text."""
    return template(chat_chunk(env, index, {field: SLOT}))


def chat_usage_chunk(env: Envelope, use: dict[str, Any]) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage``: no choices, the usage."""
    return {
        "choices": [],
        "created": env.created,
        "id": env.id,
        "model": env.model,
        "system_fingerprint": env.fingerprint,
        "object": "chat.completion.chunk",
        "usage": use,
    }

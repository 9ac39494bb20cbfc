"""The native ``/completion`` wire format: the request fields that are not sampling, and the response objects.

Sampling fields (temperature ... samplers, seed, logit_bias, n_probs, stop) are read by the engine's
``apply_request`` (mlxd.engine.sampling) and constraint fields (grammar, json_schema...) by its constraint sources; this
module reads the rest with b10621's rules (``mlxd.schemas.fields``) into one frozen model, and refuses what mlxd
cannot honour yet instead of ignoring it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from mlxd.schemas.fields import (
    INT32_MAX,
    INT64_MAX,
    FieldError,
    json_type_name,
    present,
    read_bool,
    read_int,
    read_object,
    read_str,
    read_str_list,
)

class ServerDefaults(BaseModel):
    """The server-wide values a request falls back to (b10621 copies them from the command line)."""

    model_config = ConfigDict(frozen=True)

    n_predict: int = -1
    n_keep: int = 0
    cache_prompt: bool = True
    sse_ping_interval: int = 30
    n_parallel: int = 1
    n_cache_reuse: int = 0
    verbose: bool = False  # --verbose: every answer carries b10621's "__verbose" object


class LoraEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    scale: float


class ReasoningFields(BaseModel):
    """The native reasoning-budget fields (token budget, tags, message, on-demand control), as sent."""

    model_config = ConfigDict(frozen=True)

    budget_tokens: int = -1
    start_tag: str | None = None
    end_tags: tuple[str, ...] = ()
    message: str | None = None
    control: bool = False
    generation_prompt: str = ""


class NativeOptions(BaseModel):
    """Non-sampling request fields of ``/completion`` and the routes built on it, resolved against the defaults."""

    model_config = ConfigDict(frozen=True)

    stream: bool = False
    include_usage: bool = False
    timings_per_token: bool = False
    verbose: bool = False
    cache_prompt: bool = True
    return_tokens: bool = False
    return_progress: bool = False
    sse_ping_interval: int = 30
    n_predict: int = -1
    n_indent: int = 0
    n_keep: int = 0
    n_discard: int = 0
    n_cmpl: int = 1
    t_max_predict_ms: int = -1
    response_fields: tuple[str, ...] = ()
    id_slot: int = -1
    lora: tuple[LoraEntry, ...] | None = None
    reasoning: ReasoningFields = ReasoningFields()


# Fields whose feature mlxd does not have yet: any value but the inert default is refused with the reason.
NOT_YET: dict[str, tuple[Any, str]] = {
    "echo": (False, "echoing the prefilled assistant message is not implemented"),
}


def refuse_not_yet(body: Mapping[str, Any]) -> None:
    """Refuse the fields of features mlxd does not have yet, unless they carry their inert default."""
    for name, (inert, reason) in NOT_YET.items():
        value = body.get(name)
        if value is None or value == inert:
            continue
        raise FieldError(f"Field '{name}' is not supported yet: {reason}; omit it or send {json.dumps(inert)}")
    # A continuation spec (an object) is not supported; true, "content" or "reasoning_content" continue a final
    # assistant message (mlxd.engine.chat.prompt), and are inert outside the chat routes, as upstream.
    if body.get("continue_final_message") is not None and not isinstance(body["continue_final_message"], (bool, str)):
        raise FieldError("Field 'continue_final_message': only true, false, \"content\" or \"reasoning_content\" "
                         "are supported; a continuation spec is not")


def _read_lora(body: Mapping[str, Any]) -> tuple[LoraEntry, ...] | None:
    found = present(body, "lora")
    if found is None:
        return None
    _, value = found
    if not isinstance(value, list):
        raise FieldError(
            f"Field 'lora': [json.exception.type_error.302] type must be array, but is {json_type_name(value)}"
        )
    entries: list[LoraEntry] = []
    for item in value:
        if not isinstance(item, Mapping):
            raise FieldError("Field 'lora': each entry must be an object {\"id\": N, \"scale\": S}")
        entry_id = read_int(item, "id", -1)
        scale_found = present(item, "scale")
        scale = 0.0
        if scale_found is not None:
            if isinstance(scale_found[1], bool) or not isinstance(scale_found[1], (int, float)):
                raise FieldError(
                    "Field 'scale': [json.exception.type_error.302] type must be number, but is "
                    + json_type_name(scale_found[1])
                )
            scale = float(scale_found[1])
        entries.append(LoraEntry(id=entry_id, scale=scale))
    return tuple(entries)


def read_reasoning(body: Mapping[str, Any]) -> ReasoningFields:
    """``reasoning_budget_tokens``, ``reasoning_budget_start_tag``, ``reasoning_budget_end_tags`` (alias
    ``reasoning_budget_end_tag``, one string), ``reasoning_budget_message``, ``reasoning_control``."""
    end_tags: list[str] = []
    if present(body, "reasoning_budget_end_tags") is not None:
        end_tags = read_str_list(body, "reasoning_budget_end_tags", [])
    else:
        one = read_str(body, "reasoning_budget_end_tag", None)
        end_tags = [one] if one else []
    prompt = body.get("generation_prompt")
    return ReasoningFields(
        budget_tokens=read_int(body, "reasoning_budget_tokens", -1, hard=(-1, INT32_MAX)),
        start_tag=read_str(body, "reasoning_budget_start_tag", None),
        end_tags=tuple(t for t in end_tags if t),
        message=read_str(body, "reasoning_budget_message", None),
        control=read_bool(body, "reasoning_control", False),
        generation_prompt=prompt if isinstance(prompt, str) else "",
    )


def read_native_options(body: Mapping[str, Any], defaults: ServerDefaults) -> NativeOptions:
    """Read the non-sampling fields of a native completion request, with b10621's names, aliases and limits."""
    refuse_not_yet(body)
    stream_options = read_object(body, "stream_options")
    n_cmpl = read_int(body, "n_cmpl", 1, aliases=("n",), hard=(1, max(1, defaults.n_parallel)))
    n_cache_reuse = read_int(body, "n_cache_reuse", defaults.n_cache_reuse, hard=(0, INT32_MAX))
    if n_cache_reuse > 0:
        raise FieldError(
            f"Field 'n_cache_reuse': KV-shift cache reuse is not supported (got {n_cache_reuse}); the prompt cache "
            "reuses the longest common prefix instead: send 0 or omit the field"
        )
    return NativeOptions(
        stream=read_bool(body, "stream", False),
        include_usage=read_bool(stream_options, "include_usage", False),
        timings_per_token=read_bool(body, "timings_per_token", False),
        verbose=read_bool(body, "verbose", False) or defaults.verbose,
        cache_prompt=read_bool(body, "cache_prompt", defaults.cache_prompt),
        return_tokens=read_bool(body, "return_tokens", False),
        return_progress=read_bool(body, "return_progress", False),
        sse_ping_interval=read_int(body, "sse_ping_interval", defaults.sse_ping_interval, hard=(-1, INT32_MAX)),
        n_predict=read_int(
            body, "n_predict", defaults.n_predict, aliases=("max_completion_tokens", "max_tokens"),
            hard=(-1, INT32_MAX),
        ),
        n_indent=read_int(body, "n_indent", 0, hard=(0, INT32_MAX)),
        n_keep=read_int(body, "n_keep", defaults.n_keep, hard=(-1, INT32_MAX)),
        n_discard=read_int(body, "n_discard", 0, hard=(0, INT32_MAX)),
        n_cmpl=n_cmpl,
        t_max_predict_ms=read_int(body, "t_max_predict_ms", -1, hard=(-1, INT64_MAX)),
        response_fields=tuple(read_str_list(body, "response_fields", [])),
        id_slot=read_int(body, "id_slot", -1),
        lora=_read_lora(body),
        reasoning=read_reasoning(body),
    )


# ---- responses -------------------------------------------------------------------------------------------------


class TimingsOut(BaseModel):
    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float
    draft_n: int | None = None  # b10621 adds both only when a draft proposed tokens
    draft_n_accepted: int | None = None

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """Without the draft counts unless a draft proposed tokens, as b10621's ``timings``."""
        return super().model_dump(**kwargs, exclude_none=True)


class TopProb(BaseModel):
    """One candidate: ``logprob`` normally, ``prob`` with post_sampling_probs (the other key is left unset)."""

    id: int
    token: str
    bytes: list[int]
    logprob: float | None = None
    prob: float | None = None


class TokenProbability(TopProb):
    top_logprobs: list[TopProb] | None = None
    top_probs: list[TopProb] | None = None


class CompletionChunk(BaseModel):
    """One streamed partial of ``/completion``."""

    index: int
    content: str
    tokens: list[int]
    stop: bool = False
    id_slot: int
    tokens_predicted: int
    tokens_evaluated: int
    timings: TimingsOut | None = None
    prompt_progress: dict[str, int] | None = None
    completion_probabilities: list[TokenProbability] | None = None


class CompletionResult(BaseModel):
    """The final object of ``/completion`` (streamed last, or the whole non-streamed answer)."""

    index: int
    content: str
    tokens: list[int]
    id_slot: int
    stop: bool = True
    model: str
    tokens_predicted: int
    tokens_evaluated: int
    generation_settings: dict[str, Any]
    prompt: str
    has_new_line: bool
    truncated: bool
    stop_type: str
    stopping_word: str
    tokens_cached: int
    timings: TimingsOut
    completion_probabilities: list[TokenProbability] | None = None


def dump(model: BaseModel) -> dict[str, Any]:
    """A response model as the JSON object it is sent as: optional keys that were never set are left out."""
    return model.model_dump(exclude_unset=True)

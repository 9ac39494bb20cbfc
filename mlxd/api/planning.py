"""What a generating route decides before anything is queued: the request's fields read against the server's
defaults (options, sampling, stops, adapters), and the engine request each prompt becomes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlxd.api.reasoning import native_spec
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.engine import GenerationRequest
from mlxd.errors import InvalidRequest
from mlxd.schemas.completion import NativeOptions, ServerDefaults, read_native_options
from mlxd.schemas.fields import json_type_name, present

def config_value(state: ServingState, name: str, default: Any) -> Any:
    value = getattr(state.config, name, default)
    return default if value is None else value


def n_parallel(state: ServingState) -> int:
    parallel = int(config_value(state, "parallel", -1))
    return 4 if parallel == -1 else max(1, parallel)


def server_defaults(state: ServingState) -> ServerDefaults:
    """The request defaults b10621 copies from the command line."""
    n_predict = int(config_value(state, "n_predict", -1))
    return ServerDefaults(
        n_predict=-1 if n_predict < -1 else n_predict,
        n_keep=int(config_value(state, "keep", 0)),
        cache_prompt=bool(config_value(state, "cache_prompt", True)),
        sse_ping_interval=int(config_value(state, "sse_ping_interval", 30)),
        n_parallel=n_parallel(state),
        n_cache_reuse=int(config_value(state, "cache_reuse", 0)),
        # b10621 reports "__verbose" when its verbosity is above 9, which --verbose sets.
        verbose=bool(config_value(state, "log_verbose", False)) or int(config_value(state, "log_verbosity", 3)) > 9,
    )


def read_stop(body: Mapping[str, Any], state: ServingState) -> list[str]:
    """``stop``: a string or an array of strings; empty falls back to ``--reverse-prompt``."""
    found = present(body, "stop")
    stop: list[str] = []
    if found is not None:
        value = found[1]
        if isinstance(value, str):
            stop = [value]
        elif isinstance(value, list) and all(isinstance(s, str) for s in value):
            stop = list(value)
        else:
            raise InvalidRequest(
                f"Field 'stop': [json.exception.type_error.302] type must be array, but is {json_type_name(value)}"
            )
    if not stop:
        stop = [s for s in config_value(state, "reverse_prompt", []) if s]
    return [s for s in stop if s]


def read_sampling(body: Mapping[str, Any], model: ServedModel) -> Any:
    """The request's sampling parameters over the model's defaults, refusals (``InvalidRequest``) in b10621's
    wording."""
    from mlxd.engine import apply_request

    return apply_request(body, model.sampling_defaults, sampling_vocab(model))


class _Vocab:
    """A loaded model's tokenizer as sampling reads it: plain encode/decode, vocabulary size, end-of-generation ids."""

    def __init__(self, loaded: Any) -> None:
        self._tokenizer = loaded.tokenizer
        self.n_vocab = int(loaded.vocab_size)
        self.eog_ids = tuple(loaded.eos_token_ids)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids)))


_VOCABS: dict[int, _Vocab] = {}


def sampling_vocab(model: ServedModel) -> _Vocab:
    """The tokenizer view sampling reads (one per loaded model)."""
    key = id(model.loaded)
    vocab = _VOCABS.get(key)
    if vocab is None or vocab._tokenizer is not model.loaded.tokenizer:
        vocab = _VOCABS[key] = _Vocab(model.loaded)
    return vocab


def lora_scales(opts: NativeOptions) -> dict[int, float] | None:
    """Per-request adapter scales as listed (a later entry for an id wins); None when the field is absent or
    empty, since b10621 then applies the server-wide scales. The worker gives adapters not listed 0 and ignores
    ids no adapter has, as b10621's ``construct_lora_list`` does."""
    if not opts.lora:
        return None
    return {entry.id: entry.scale for entry in opts.lora}


@dataclass
class Plan:
    """Everything decided before submitting: the options, sampling, stops and the per-prompt token lists."""

    opts: NativeOptions
    sampling: Any
    stop: list[str]
    prompts: list[list[int]]
    cache_namespace: str = "raw"
    display: dict[str, Any] = field(default_factory=dict)
    constraint_spec: Any = None  # an engine.constrain.ConstraintSpec, for generation_settings
    constraint: Any = None  # the same, compiled, for the worker
    reasoning: Any = None  # an engine.types.ReasoningSpec (mlxd.api.reasoning), None for no budget
    eog_ids: tuple[int, ...] = ()  # the model's end-of-generation ids, which ignore_eos bans
    speculative_types: str = "none"  # the model's --spec-type in use, b10621's comma-joined names

    @property
    def n_probs(self) -> int:
        return int(getattr(self.sampling, "n_probs", 0))

    @property
    def post_sampling(self) -> bool:
        return bool(getattr(self.sampling, "post_sampling_probs", False))

    @property
    def text_only_chunks(self) -> bool:
        """Whether a streamed token's chunk carries its text alone (no probabilities, no timings): its JSON then
        comes from a per-request template (json_out.template)."""
        return self.n_probs == 0 and not self.opts.timings_per_token


def plan(body: Mapping[str, Any], state: ServingState, model: ServedModel, prompts: list[list[int]],
         *, cache_namespace: str = "raw") -> Plan:
    """Read a request's fields into a ``Plan``; every refusal happens here or in ``constrain``, before anything
    is queued."""
    opts = read_native_options(body, server_defaults(state))
    return Plan(opts=opts, sampling=read_sampling(body, model), stop=read_stop(body, state), prompts=prompts,
                cache_namespace=cache_namespace, reasoning=native_spec(opts.reasoning),
                eog_ids=tuple(sorted(int(t) for t in model.loaded.eos_token_ids)),
                speculative_types=(model.worker.speculative_info() or {"type": "none"})["type"])


def generation_settings(p: Plan, *, chat_format: str = "Content-only", reasoning_format: str = "deepseek",
                        generation_prompt: str = "") -> dict[str, Any]:
    """``generation_settings`` as b10621 reports it (task_params::to_json), for the final object and /slots."""
    sp = p.sampling
    sampling: dict[str, Any] = dict(sp.model_dump()) if hasattr(sp, "model_dump") else {}
    sampling["logit_bias"] = [{"bias": b, "token": t} for t, b in dict(sampling.get("logit_bias") or {}).items()]
    if getattr(sp, "ignore_eos", False):
        # b10621 adds a -inf bias per end-of-generation token to the request's own (JSON null for -inf).
        sampling["logit_bias"] += [{"bias": None, "token": t} for t in p.eog_ids]
    for key in ("dry_sequence_breakers", "samplers"):
        sampling[key] = list(sampling.get(key) or [])
    out: dict[str, Any] = {}
    head = ("seed", "temperature", "dynatemp_range", "dynatemp_exponent", "top_k", "top_p", "min_p", "top_n_sigma",
            "xtc_probability", "xtc_threshold", "typical_p", "repeat_last_n", "repeat_penalty", "presence_penalty",
            "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
            "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta", "adaptive_target", "adaptive_decay")
    for key in head:
        if key in sampling:
            out[key] = sampling[key]
    out.update({
        "stop": list(p.stop),
        "max_tokens": p.opts.n_predict,
        "n_predict": p.opts.n_predict,
        "n_keep": p.opts.n_keep,
        "n_discard": p.opts.n_discard,
        "ignore_eos": bool(getattr(sp, "ignore_eos", False)),
        "stream": p.opts.stream,
        "logit_bias": sampling.get("logit_bias", []),
        "n_probs": p.n_probs,
        "min_keep": int(getattr(sp, "min_keep", 0)),
        **grammar_settings(p.constraint_spec),
        "chat_format": chat_format,
        "reasoning_format": reasoning_format,
        "reasoning_in_content": False,
        "generation_prompt": generation_prompt,
        "samplers": sampling.get("samplers", []),
        "speculative.types": p.speculative_types,
        "timings_per_token": p.opts.timings_per_token,
        "post_sampling_probs": p.post_sampling,
        "backend_sampling": bool(getattr(sp, "backend_sampling", False)),
        "lora": [{"id": e.id, "scale": e.scale} for e in p.opts.lora or ()],
    })
    return out


# The keys /slots leaves out of a slot's params (b10621's metrics-only form of task_params::to_json).
FULL_FORM_ONLY = ("dry_sequence_breakers", "stop", "logit_bias", "grammar", "grammar_lazy", "grammar_triggers",
                  "preserved_tokens")


def slot_params(settings: dict[str, Any]) -> dict[str, Any]:
    """A slot's ``params`` on /slots: the generation settings without the full-form-only keys."""
    return {k: v for k, v in settings.items() if k not in FULL_FORM_ONLY}


def grammar_settings(spec: Any) -> dict[str, Any]:
    """The grammar part of ``generation_settings``: the constraint's source, laziness, triggers, preserved tokens."""
    if spec is None:
        return {"grammar": "", "grammar_lazy": False, "grammar_triggers": [], "preserved_tokens": []}
    triggers = []
    for t in spec.triggers:
        trigger: dict[str, Any] = {"type": int(t.type), "value": t.value}
        if t.token is not None:
            trigger["token"] = t.token
        triggers.append(trigger)
    return {"grammar": spec.source, "grammar_lazy": spec.lazy, "grammar_triggers": triggers,
            "preserved_tokens": list(spec.preserved_tokens)}


def engine_request(p: Plan, tokens: list[int], *, progress: bool = False) -> GenerationRequest:
    """The worker's request for one prompt of the plan; ``progress``: the route renders ``return_progress``."""
    media = getattr(tokens, "media", None)  # api.media_parts.MediaPrompt: its media key keeps caches apart
    return GenerationRequest(
        prompt_tokens=list(tokens),
        media=media,
        sampling=p.sampling,
        n_predict=p.opts.n_predict,
        stop=list(p.stop),
        ignore_eos=bool(getattr(p.sampling, "ignore_eos", False)),
        n_probs=p.n_probs,
        post_sampling_probs=p.post_sampling,
        cache_prompt=p.opts.cache_prompt,
        cache_namespace=p.cache_namespace if media is None else f"{p.cache_namespace}:media:{media.key}",
        id_slot=p.opts.id_slot,
        n_keep=p.opts.n_keep,
        n_discard=p.opts.n_discard,
        n_indent=p.opts.n_indent,
        t_max_predict_ms=max(0, p.opts.t_max_predict_ms),
        lora=lora_scales(p.opts),
        display_params=p.display or slot_params(generation_settings(p)),
        constraint=p.constraint,
        reasoning=p.reasoning,
        return_progress=progress and p.opts.stream and p.opts.return_progress,
    )

"""Per-request sampling parameters with llama-server b10621's names and defaults, and how defaults are built.

Field names are those of native ``/completion`` (and of ``generation_settings`` in its responses). Server-wide
defaults come from the configuration (option names are llama-server's long spellings), which already holds the
checkpoint's ``generation_config.json`` recommendations as a source of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, field_validator

from mlxd.config.domains import logit_bias
from mlxd.errors import InvalidRequest as InvalidRequest  # re-exported: what request.apply_request raises

DEFAULT_SEED = 0xFFFFFFFF
DEFAULT_SAMPLERS: tuple[str, ...] = (
    "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
)
DEFAULT_DRY_BREAKERS: tuple[str, ...] = ("\n", ":", '"', "*")

# llama.cpp's sampler vocabulary: canonical names, the alternative spellings it also accepts, and the letters of
# --sampler-seq. Unknown names and letters are dropped silently, as upstream only logs a warning.
SAMPLER_NAMES: tuple[str, ...] = (
    "dry", "top_k", "top_p", "top_n_sigma", "typ_p", "min_p", "temperature", "xtc", "infill", "penalties",
    "adaptive_p",
)
SAMPLER_ALT_NAMES: Mapping[str, str] = {
    "top-k": "top_k", "top-p": "top_p", "top-n-sigma": "top_n_sigma", "nucleus": "top_p", "typical-p": "typ_p",
    "typical": "typ_p", "typ-p": "typ_p", "typ": "typ_p", "min-p": "min_p", "temp": "temperature",
    "adaptive-p": "adaptive_p",
}
SAMPLER_CHARS: Mapping[str, str] = {
    "d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p", "t": "temperature",
    "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p",
}


@runtime_checkable
class SamplingVocab(Protocol):
    """What sampling needs of a tokenizer: plain encode/decode (no special tokens), vocabulary size, EOG ids."""

    @property
    def n_vocab(self) -> int: ...

    @property
    def eog_ids(self) -> Sequence[int]: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class SamplingParams(BaseModel):
    """Every sampling field of native ``/completion``, with b10621's defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    repeat_last_n: int = 64
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: tuple[str, ...] = DEFAULT_DRY_BREAKERS
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    seed: int = DEFAULT_SEED  # uint32; DEFAULT_SEED draws a random seed per request
    min_keep: int = 0
    n_probs: int = 0
    post_sampling_probs: bool = False
    # token id -> bias; -inf bans. Several entries for one token add up, as upstream applies each in turn.
    logit_bias: dict[int, float] = {}
    samplers: tuple[str, ...] = DEFAULT_SAMPLERS
    ignore_eos: bool = False
    backend_sampling: bool = False

    @field_validator("samplers")
    @classmethod
    def _known_samplers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if name not in SAMPLER_NAMES:
                raise ValueError(f"unknown sampler {name!r}")
        return value

    @field_validator("seed")
    @classmethod
    def _uint32_seed(cls, value: int) -> int:
        return value & 0xFFFFFFFF

    @classmethod
    def server_defaults(cls, **values: Any) -> SamplingParams:
        """Server-wide defaults from field values (``temperature=0.6, top_k=20``)."""
        return cls(**values)


def sampler_names_from_list(names: Iterable[str]) -> tuple[str, ...]:
    """Resolve sampler names (canonical or alternative spellings), dropping unknown ones as upstream does."""
    out = []
    for name in names:
        canonical = name if name in SAMPLER_NAMES else SAMPLER_ALT_NAMES.get(name)
        if canonical is not None:
            out.append(canonical)
    return tuple(out)


def sampler_names_from_chars(chars: str) -> tuple[str, ...]:
    """Resolve a --sampler-seq string such as ``edskypmxt``, dropping unknown letters."""
    return tuple(SAMPLER_CHARS[c] for c in chars if c in SAMPLER_CHARS)


def parse_logit_bias_option(entries: Iterable[str | tuple[int, float]]) -> dict[int, float]:
    """``--logit-bias`` values, ``TOKEN_ID(+|-)BIAS`` such as ``15043+1`` or ``2-inf``, into {token: bias} (the
    configuration's own parser, mlxd.config.domains, which refuses a bad value before it reaches a Config)."""
    return logit_bias(entries)


# Configuration option (llama-server's long spelling) -> SamplingParams field.
OPTION_FIELDS: Mapping[str, str] = {
    "temp": "temperature", "temperature": "temperature", "top-k": "top_k", "top-p": "top_p", "min-p": "min_p",
    "top-nsigma": "top_n_sigma", "top-n-sigma": "top_n_sigma", "xtc-probability": "xtc_probability",
    "xtc-threshold": "xtc_threshold", "typical": "typical_p", "typical-p": "typical_p",
    "repeat-last-n": "repeat_last_n", "repeat-penalty": "repeat_penalty", "presence-penalty": "presence_penalty",
    "frequency-penalty": "frequency_penalty", "dry-multiplier": "dry_multiplier", "dry-base": "dry_base",
    "dry-allowed-length": "dry_allowed_length", "dry-penalty-last-n": "dry_penalty_last_n",
    "dry-sequence-breaker": "dry_sequence_breakers", "adaptive-target": "adaptive_target",
    "adaptive-decay": "adaptive_decay", "dynatemp-range": "dynatemp_range", "dynatemp-exp": "dynatemp_exponent",
    "mirostat": "mirostat", "mirostat-lr": "mirostat_eta", "mirostat-ent": "mirostat_tau", "seed": "seed",
    "ignore-eos": "ignore_eos", "backend-sampling": "backend_sampling", "samplers": "samplers",
    "sampler-seq": "samplers", "sampling-seq": "samplers", "logit-bias": "logit_bias",
}
def defaults_from(config_values: Mapping[str, Any], explicitly_set: set[str]) -> SamplingParams:
    """Server-wide sampling defaults from resolved option values.

    ``config_values`` maps option names to resolved values (unknown options are ignored, so a whole Config dump
    may be passed); ``explicitly_set`` names the options some source set. The checkpoint's own recommendations
    (``generation_config.json``) are already among the values: the configuration reads them as a source
    (mlxd.config.sources.checkpoint), so nothing is merged here.
    """
    values: dict[str, Any] = {}
    # Options that share a field (``samplers``/``sampling-seq``, ``temp``/``temperature``): one a source set beats
    # another's default, so the explicitly set ones are applied last.
    for option, value in sorted(config_values.items(), key=lambda item: item[0] in explicitly_set):
        field = OPTION_FIELDS.get(option)
        if field is None or value is None:
            continue
        values[field] = _option_value(option, value)
    return SamplingParams(**values)


def _option_value(option: str, value: Any) -> Any:
    if option == "samplers":
        names = value.split(";") if isinstance(value, str) else list(value)
        return sampler_names_from_list(names)
    if option in ("sampler-seq", "sampling-seq"):
        return sampler_names_from_chars(str(value))
    if option == "dry-sequence-breaker":
        breakers = [value] if isinstance(value, str) else list(value)
        return () if breakers == ["none"] else tuple(breakers)
    if option == "logit-bias":
        return parse_logit_bias_option([value] if isinstance(value, str) else value)
    if option == "seed":
        return int(value) & 0xFFFFFFFF
    if option == "top-k" and isinstance(value, float) and math.isfinite(value):
        return int(value)
    return value

"""Per-request sampling parameters with llama-server b10621's names and defaults, and how defaults are built.

Field names are those of native ``/completion`` (and of ``generation_settings`` in its responses). Server-wide
defaults come from the configuration (option names are llama-server's long spellings), which already holds the
checkpoint's ``generation_config.json`` recommendations as a source of its own.
"""

from __future__ import annotations

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

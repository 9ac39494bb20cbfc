"""b10621's evaluation of a request's sampling fields (tools/server/server-schema.cpp), field by field.

Rules: a field whose value is JSON null counts as absent; numbers with hard limits are refused with upstream's
"Value must be between" wording, plain limits are clamped; a value of the wrong JSON type is refused with
nlohmann::json's type_error text. Every message is prefixed with ``Field '<name>': `` as upstream does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from mlxd.engine.sampling.params import (
    SamplingParams,
    SamplingVocab,
    sampler_names_from_chars,
    sampler_names_from_list,
)
from mlxd.errors import InvalidRequest
from mlxd.json_types import json_type_name

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FLT_MAX = 3.4028234663852886e38


def _type_error(expected: str, value: Any) -> str:
    return f"[json.exception.type_error.302] type must be {expected}, but is {json_type_name(value)}"


def present(fields: Mapping[str, Any], *names: str) -> str | None:
    """The first of ``names`` present with a non-null value (null means "use the server default")."""
    for name in names:
        if fields.get(name) is not None:
            return name
    return None


def _fail(name: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"Field '{name}': {message}")


def _as_held(value: int | float, is_int: bool) -> int | float:
    """A value as upstream holds it: float fields are float32, compared and printed as such."""
    return value if is_int else float(np.float32(value))


def _cpp(value: int | float, is_int: bool) -> str:
    """``std::to_string`` of an int or float."""
    return str(int(value)) if is_int else f"{value:f}"


def read_number(fields: Mapping[str, Any], names: tuple[str, ...], default: Any, *, is_int: bool,
                limits: tuple[float, float] | None = None, hard: bool = False) -> Any:
    """One numeric field as b10621's ``field_num`` evaluates it: absent -> default, clamped or hard-limited."""
    name = present(fields, *names)
    if name is None:
        return default
    raw = fields[name]
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise _fail(name, _type_error("number", raw))
    if isinstance(raw, float) and not math.isfinite(raw):
        raise _fail(name, f"number overflow: {raw}")
    value: int | float = math.trunc(raw) if is_int and isinstance(raw, float) else raw
    if not is_int:
        try:
            value = float(value)
        except OverflowError:  # an integer past the double range (more than 308 digits)
            raise _fail(name, "number overflow: the value is outside the range of a double") from None
    if limits is None:
        return value
    low, high = limits
    if hard:
        got, low_h, high_h = (_as_held(v, is_int) for v in (value, low, high))
        if got < low_h or got > high_h:
            raise _fail(name, f"Value must be between {_cpp(low_h, is_int)} <= value <= {_cpp(high_h, is_int)}, "
                              f"but got {_cpp(got, is_int)}")
        return value
    return max(low, min(high, value))


def read_bool(fields: Mapping[str, Any], name: str, default: bool) -> bool:
    """One boolean field (nlohmann's ``get<bool>`` accepts only true/false)."""
    if fields.get(name) is None:
        return default
    raw = fields[name]
    if not isinstance(raw, bool):
        raise _fail(name, _type_error("boolean", raw))
    return raw


# (field, aliases, is_int, limits, hard) in schema order, so the first bad field is the one upstream reports.
_NUMBERS: tuple[tuple[str, tuple[str, ...], bool, tuple[float, float] | None, bool], ...] = (
    ("top_k", (), True, (0, INT32_MAX), False),
    ("top_p", (), False, (0.0, 1.0), False),
    ("min_p", (), False, (0.0, 1.0), False),
    ("top_n_sigma", (), False, None, False),
    ("xtc_probability", (), False, (0.0, 1.0), False),
    ("xtc_threshold", (), False, (0.0, 1.0), False),
    ("typical_p", (), False, None, False),
    ("temperature", (), False, (0.0, math.inf), False),
    ("dynatemp_range", (), False, None, False),
    ("dynatemp_exponent", (), False, None, False),
    ("repeat_last_n", (), True, (0, INT32_MAX), True),
    ("repeat_penalty", (), False, None, False),
    ("frequency_penalty", (), False, None, False),
    ("presence_penalty", (), False, None, False),
    ("dry_multiplier", (), False, None, False),
    ("dry_base", (), False, None, False),
    ("dry_allowed_length", (), True, (0, INT32_MAX), True),
    ("dry_penalty_last_n", (), True, (0, INT32_MAX), True),
    ("mirostat", (), True, (0, 2), False),
    ("mirostat_tau", (), False, None, False),
    ("mirostat_eta", (), False, None, False),
    ("adaptive_target", (), False, (-FLT_MAX, 1.0), False),
    ("adaptive_decay", (), False, (0.0, 0.99), True),
    ("seed", (), True, None, False),
    ("n_probs", ("logprobs",), True, None, False),
    ("min_keep", (), True, (0, INT32_MAX), True),
)


def apply_request(fields: Mapping[str, Any], defaults: SamplingParams, vocab: SamplingVocab) -> SamplingParams:
    """Evaluate a request's sampling fields over ``defaults``; raises InvalidRequest with upstream's wording."""
    values: dict[str, Any] = {}
    for field, aliases, is_int, limits, hard in _NUMBERS:
        default = getattr(defaults, field)
        value = read_number(fields, (field, *aliases), default, is_int=is_int, limits=limits, hard=hard)
        if field == "dry_base" and value < 1.0:
            value = defaults.dry_base  # below 1 means "the server's base", not an error
        if field == "seed":
            value = int(value) & 0xFFFFFFFF  # uint32 conversion: -1 becomes 4294967295, i.e. random
        values[field] = value
    values["backend_sampling"] = read_bool(fields, "backend_sampling", defaults.backend_sampling)
    values["post_sampling_probs"] = read_bool(fields, "post_sampling_probs", defaults.post_sampling_probs)
    values["dry_sequence_breakers"] = _dry_breakers(fields, defaults)
    values["logit_bias"] = _logit_bias(fields, defaults, vocab)
    values["ignore_eos"] = read_bool(fields, "ignore_eos", defaults.ignore_eos)
    values["samplers"] = _samplers(fields, defaults)
    return defaults.model_copy(update=values)


def _dry_breakers(fields: Mapping[str, Any], defaults: SamplingParams) -> tuple[str, ...]:
    if fields.get("dry_sequence_breakers") is None:
        return defaults.dry_sequence_breakers
    raw = fields["dry_sequence_breakers"]
    # A value of the wrong type falls back to an empty list upstream, which is then refused.
    breakers = raw if isinstance(raw, list) and all(isinstance(b, str) for b in raw) else []
    if not breakers:
        raise _fail("dry_sequence_breakers", "Error: dry_sequence_breakers must be a non-empty array of strings")
    return tuple(breakers)


def _logit_bias(fields: Mapping[str, Any], defaults: SamplingParams, vocab: SamplingVocab) -> dict[int, float]:
    if fields.get("logit_bias") is None:
        return dict(defaults.logit_bias)
    raw = fields["logit_bias"]
    n_vocab = vocab.n_vocab
    out: dict[int, float] = {}

    def add(token: int, bias: float) -> None:
        out[token] = out.get(token, 0.0) + bias

    if isinstance(raw, list):
        for entry in raw:
            if not isinstance(entry, list) or len(entry) != 2:
                continue
            bias = _bias(entry[1])
            if bias is None:
                continue
            key = entry[0]
            if isinstance(key, int) and not isinstance(key, bool):
                if 0 <= key < n_vocab:
                    add(key, bias)
            elif isinstance(key, str):
                for token in vocab.encode(key):
                    add(token, bias)
    elif isinstance(raw, dict):
        for key, value in raw.items():
            bias = _bias(value)
            if bias is None:
                continue
            token_id = _strtol_whole(key)
            if token_id is not None:
                if 0 <= token_id < n_vocab:
                    add(token_id, bias)
            else:
                for t in vocab.encode(key):
                    add(t, bias)
    return out


def _bias(value: Any) -> float | None:
    """A bias value: a number, or ``false`` to ban; anything else skips the entry."""
    if value is False:
        return -math.inf
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an integer past the double range (more than 308 digits)
            raise _fail("logit_bias", "number overflow: a bias is outside the range of a double") from None
    return None


_STRTOL = re.compile(r"[ \t\n\v\f\r]*([+-]?\d+)")


def _strtol_whole(key: str) -> int | None:
    """The integer ``strtol`` reads when it consumes the whole key, else None (then the key is text).

    strtol of an empty key consumes nothing and stops at the terminator, so "" reads as token 0, as upstream.
    """
    if key == "":
        return 0
    m = _STRTOL.match(key)
    if m is None or m.end() != len(key):
        return None
    return int(m.group(1))


def _samplers(fields: Mapping[str, Any], defaults: SamplingParams) -> tuple[str, ...]:
    if fields.get("samplers") is None:
        return defaults.samplers
    raw = fields["samplers"]
    if isinstance(raw, list):
        for name in raw:
            if not isinstance(name, str):
                raise _fail("samplers", _type_error("string", name))
        names = sampler_names_from_list(raw)
    elif isinstance(raw, str):
        names = sampler_names_from_chars(raw)
    else:
        return defaults.samplers
    return names

"""Values: the UNSET sentinel, a value with its provenance, and parsing text or TOML values into an option's type."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from typing import Any

from mlxd.config.options import Kind, OptionSpec, ValueType
from mlxd.config import domains


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset.UNSET
"""A source did not mention the option (as opposed to setting it to its default)."""


@dataclass(frozen=True)
class Setting:
    """One option's value as one source gives it, with the provenance string of that source."""

    value: Any
    source: str


def is_default(source: str) -> bool:
    """Whether a provenance names no source that set the option: ``default``, or a default that depends on another
    option (``default:--config``)."""
    return source == "default" or source.startswith("default:")


class BadValue(ValueError):
    """A value outside an option's type or domain; the message says what was expected."""


# b10621's boolean words (docs/precedence.md rule 1.6): exact and case-sensitive.
TRUTHY = frozenset({"on", "enabled", "true", "1"})
FALSEY = frozenset({"off", "disabled", "false", "0"})
GGML_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def parse_bool_value(text: str) -> bool:
    """b10621's parse_bool_value: only the truthy and falsey words (rule 1.5)."""
    if text in TRUTHY:
        return True
    if text in FALSEY:
        return False
    raise BadValue("invalid boolean value (expected on/enabled/true/1 or off/disabled/false/0)")


def _int(text: str) -> int:
    try:
        return int(text.strip(), 10)
    except ValueError:
        raise BadValue("expected an integer") from None


def _float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise BadValue("expected a number") from None
    if math.isnan(value) or math.isinf(value):
        raise BadValue("expected a finite number")
    return value


def _check_domain(spec: OptionSpec, value: Any) -> None:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item is None:
            continue
        if spec.choices is not None and item not in spec.choices:
            raise BadValue(f"expected one of {', '.join(spec.choices)}")
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if spec.minimum is not None and item < spec.minimum:
                raise BadValue(f"must be >= {_num(spec.minimum)}")
            if spec.maximum is not None and item > spec.maximum:
                raise BadValue(f"must be <= {_num(spec.maximum)}")
        if spec.domain == "ngl" and item not in ("auto", "all"):
            if _int(item) < -1:
                raise BadValue("expected a layer count, 'auto' or 'all'")
        elif spec.domain == "ggml_type" and item not in GGML_TYPES:
            raise BadValue(f"expected one of {', '.join(GGML_TYPES)}")
        elif spec.domain == "percent" and not 0 <= _int(item) <= 100:
            raise BadValue("expected an integer from 0 to 100")
        elif spec.domain == "json_object" and not _is_json_object(item):
            raise BadValue("expected a JSON object, e.g. '{\"enable_thinking\": false}'")
        elif spec.domain == "logit_bias":
            try:
                domains.logit_bias_entry(str(item))
            except ValueError as exc:
                raise BadValue(str(exc)) from None


def _scaled(item: Any) -> tuple[str, float]:
    """One (FNAME, SCALE) pair: ``FNAME:SCALE`` text, or a two-item array from a typed document (TOML, JSON)."""
    if isinstance(item, str):
        try:
            return domains.lora_scaled(item)
        except ValueError as exc:
            raise BadValue(str(exc)) from None
    if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str) and item[0] \
            and isinstance(item[1], (int, float)) and not isinstance(item[1], bool) and math.isfinite(item[1]):
        return item[0], float(item[1])
    raise BadValue("expected FNAME:SCALE or [FNAME, SCALE] with a finite number as SCALE")


def _is_json_object(text: Any) -> bool:
    if isinstance(text, dict):
        return True
    try:
        return isinstance(json.loads(text), dict)
    except (TypeError, ValueError):
        return False


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


def split_list(spec: OptionSpec, text: str) -> list[str]:
    """One command-line or env value of a list option: comma-split when the option takes comma lists."""
    if spec.split:
        return [part.strip() for part in text.split(",") if part.strip()]
    return [text]


def parse_text(spec: OptionSpec, text: str | list[str]) -> Any:
    """A value from text (command line, env, INI) in the option's type; BadValue if out of type or domain."""
    vt = spec.value_type
    if vt is ValueType.PAIR:
        value: Any = list(text) if isinstance(text, list) else text.split()
        if len(value) != 2:
            raise BadValue("expected two values")
    elif isinstance(text, list):
        raise BadValue("expected one value")
    elif vt is ValueType.INT:
        value = _int(text)
    elif vt is ValueType.FLOAT:
        value = _float(text)
    elif vt is ValueType.BOOL:
        value = parse_bool_value(text)
    elif vt is ValueType.LIST:
        value = split_list(spec, text)
    elif vt is ValueType.SCALED:
        value = [_scaled(item) for item in split_list(spec, text)]
    else:
        value = text
    _check_domain(spec, value)
    return value


def parse_native(spec: OptionSpec, raw: Any) -> Any:
    """A value from a typed document (TOML, admin JSON) in the option's type; BadValue if it does not fit."""
    vt = spec.value_type
    if raw is None:
        if spec.optional:
            return None
        raise BadValue("must not be null")
    if vt is ValueType.BOOL:
        if not isinstance(raw, bool):
            raise BadValue("expected true or false")
        return raw
    if isinstance(raw, bool):
        raise BadValue(f"expected {_expected(spec)}, not a boolean")
    if vt is ValueType.SCALED:
        if isinstance(raw, str):
            return parse_text(spec, raw)
        if not isinstance(raw, (list, tuple)):
            raise BadValue("expected FNAME:SCALE strings or [FNAME, SCALE] pairs")
        return [_scaled(item) for item in raw]
    if vt in (ValueType.LIST, ValueType.PAIR):
        if isinstance(raw, str):
            return parse_text(spec, raw) if vt is ValueType.LIST else parse_text(spec, raw.split())
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise BadValue("expected an array of strings or a comma-separated string")
        value: Any = list(raw)
        if vt is ValueType.PAIR and len(value) != 2:
            raise BadValue("expected two values")
    elif vt is ValueType.INT:
        if isinstance(raw, str):
            return parse_text(spec, raw)
        if not isinstance(raw, int):
            raise BadValue("expected an integer")
        value = raw
    elif vt is ValueType.FLOAT:
        if isinstance(raw, str):
            return parse_text(spec, raw)
        if not isinstance(raw, (int, float)):
            raise BadValue("expected a number")
        value = float(raw)
    else:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            raw = str(raw)
        if not isinstance(raw, str):
            raise BadValue("expected a string")
        value = raw
    _check_domain(spec, value)
    return value


def _expected(spec: OptionSpec) -> str:
    return {ValueType.INT: "an integer", ValueType.FLOAT: "a number", ValueType.STR: "a string",
            ValueType.LIST: "a list", ValueType.PAIR: "two values", ValueType.BOOL: "a boolean",
            ValueType.SCALED: "FNAME:SCALE pairs"}[spec.value_type]


def flag_value(spec: OptionSpec, spelling: str) -> bool:
    """The value a value-less spelling sets: true, or false for a negative spelling (rule 1.10)."""
    return spelling not in spec.negatives


def is_value_less(spec: OptionSpec) -> bool:
    return spec.kind in (Kind.FLAG, Kind.BOOL_PAIR)

"""Reading request fields the way b10621 reads them, so that refusals carry upstream's exact wording.

llama-server reads each field with nlohmann::json conversions: JSON null counts as absent, a wrong type is a 400
``Field 'NAME': [json.exception.type_error.302] type must be number, but is string``, a number out of a hard range
is a 400 ``Field 'NAME': Value must be between LO <= value <= HI, but got V``, and soft ranges clamp silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mlxd.errors import InvalidRequest
from mlxd.json_types import json_type_name

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class FieldError(InvalidRequest):
    """A request field that b10621 refuses: 400 ``invalid_request_error`` with upstream's wording."""


def _type_error(name: str, expected: str, value: Any) -> FieldError:
    return FieldError(
        f"Field '{name}': [json.exception.type_error.302] type must be {expected}, but is {json_type_name(value)}"
    )


def present(body: Mapping[str, Any], *names: str) -> tuple[str, Any] | None:
    """The first of ``names`` that is present and not null, with its value; None when all are absent."""
    for name in names:
        if name in body and body[name] is not None:
            return name, body[name]
    return None


def _format_number(v: float | int) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
        return str(int(v))
    return str(v)


def read_int(
    body: Mapping[str, Any],
    name: str,
    default: int,
    *,
    aliases: Sequence[str] = (),
    hard: tuple[int, int] | None = None,
    clamp: tuple[int, int] | None = None,
) -> int:
    """An integer field: booleans convert as nlohmann converts them, floats truncate toward zero."""
    found = present(body, name, *aliases)
    if found is None:
        return default
    key, value = found
    if isinstance(value, bool):
        number: int | float = int(value)
    elif isinstance(value, (int, float)):
        number = value
    else:
        raise _type_error(key, "number", value)
    if isinstance(number, float) and not math.isfinite(number):
        raise FieldError(f"Field '{key}': Value must be a finite number, but got {number}")
    if hard is not None and not hard[0] <= number <= hard[1]:
        raise FieldError(
            f"Field '{key}': Value must be between {hard[0]} <= value <= {hard[1]}, but got {_format_number(number)}"
        )
    result = int(number)
    if clamp is not None:
        result = min(max(result, clamp[0]), clamp[1])
    return result


def read_bool(body: Mapping[str, Any], name: str, default: bool) -> bool:
    """A boolean field: only JSON true/false are booleans."""
    found = present(body, name)
    if found is None:
        return default
    key, value = found
    if not isinstance(value, bool):
        raise _type_error(key, "boolean", value)
    return value


def read_str(body: Mapping[str, Any], name: str, default: str | None) -> str | None:
    """A string field."""
    found = present(body, name)
    if found is None:
        return default
    key, value = found
    if not isinstance(value, str):
        raise _type_error(key, "string", value)
    return value


def read_str_list(body: Mapping[str, Any], name: str, default: list[str]) -> list[str]:
    """An array-of-strings field."""
    found = present(body, name)
    if found is None:
        return list(default)
    key, value = found
    if not isinstance(value, list):
        raise _type_error(key, "array", value)
    for item in value:
        if not isinstance(item, str):
            raise _type_error(key, "string", item)
    return list(value)


def read_object(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """An object field; absent or null reads as an empty object."""
    found = present(body, name)
    if found is None:
        return {}
    key, value = found
    if not isinstance(value, Mapping):
        raise _type_error(key, "object", value)
    return value

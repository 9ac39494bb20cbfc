"""The name of a decoded JSON value's type, as nlohmann::json's ``type_name()`` words it in b10621's errors.

A leaf beside ``mlxd.errors``: the schemas, the engine's sampling fields and the api all word type errors with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def json_type_name(value: Any) -> str:
    """``null``, ``boolean``, ``number``, ``string``, ``array`` or ``object`` (``discarded`` for anything else)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return "discarded"

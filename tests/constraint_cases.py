"""Constraint cases shared by the engine and e2e tiers: only the constraint can make a random model's output valid.

Every string and array is bounded so that a random model reaches the end of the grammar, which ends the
generation, within the token budget.
"""

from __future__ import annotations

import re
from typing import Any

SEEDS = list(range(20))

GBNF = r"""
root   ::= "SELECT " column ("," column){0,3} " FROM " table ";"
column ::= [a-z] [a-z0-9_]{0,7}
table  ::= "users" | "orders" | "items"
"""
GBNF_LINE = re.compile(r"SELECT [a-z][a-z0-9_]{0,7}(,[a-z][a-z0-9_]{0,7}){0,3} FROM (users|orders|items);")

# Nested objects, arrays, enums and required keys; every string and array is bounded so that a random model
# reaches the end of the grammar, which ends the generation.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "status": {"enum": ["open", "closed", "pending"]},
        "owner": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z]{1,8}$"},
                "admin": {"type": "boolean"},
            },
            "required": ["name", "admin"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    },
    "required": ["id", "status", "owner", "tags"],
    "additionalProperties": False,
}


def validate_record(value: Any) -> None:
    assert set(value) == {"id", "status", "owner", "tags"}
    assert isinstance(value["id"], int) and 0 <= value["id"] <= 999
    assert value["status"] in ("open", "closed", "pending")
    assert set(value["owner"]) == {"name", "admin"}
    assert re.fullmatch("[a-z]{1,8}", value["owner"]["name"])
    assert isinstance(value["owner"]["admin"], bool)
    assert 1 <= len(value["tags"]) <= 3 and set(value["tags"]) <= {"a", "b", "c"}


# llama-server's json_object may carry a schema; this one bounds keys and values so that a random model (which
# almost never samples a closing quote on its own) still reaches the end within the token budget.
BOUNDED_OBJECT: dict[str, Any] = {
    "type": "object",
    "patternProperties": {"^[a-z]{1,6}$": {"type": "integer", "minimum": 0, "maximum": 99}},
    "additionalProperties": False,
    "maxProperties": 3,
}


def validate_bounded_object(value: Any) -> None:
    assert isinstance(value, dict) and len(value) <= 3
    assert all(re.fullmatch("[a-z]{1,6}", k) and 0 <= v <= 99 for k, v in value.items())

"""Tool-call forcing: a grammar for the model's ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` format.

With ``tool_choice: "required"`` (or a named function) the answer must be a call, so the grammar applies from
the first token; with ``"auto"`` it is lazy and wakes at ``<tool_call>``, so that a call the model starts on its
own always parses. Arguments are constrained by each function's ``parameters`` schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mlxd.engine.constrain.compile import JSON_OPTIONS
from mlxd.engine.constrain.errors import ConstraintError
from mlxd.engine.constrain.spec import ConstraintSpec, Trigger, TriggerType
from mlxd.engine.constrain.tokenizer import ConstraintTokenizer

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def _function(tool: Any) -> Mapping[str, Any]:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ConstraintError('tools: each tool must be {"type": "function", "function": {"name": ..., ...}}')
    return function


def _call_schema(function: Mapping[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters")
    if not isinstance(parameters, Mapping) or not parameters:
        parameters = {"type": "object"}
    return {
        "type": "object",
        "properties": {"name": {"const": function["name"]}, "arguments": parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _named(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return function["name"]
    return None


def _marker(text: str, tokenizer: ConstraintTokenizer | None) -> str:
    # A marker that is one special token must be produced as that token, as the model was trained to.
    if tokenizer is not None:
        token = tokenizer.single_token(text)
        if token is not None and tokenizer.ll.is_special_token(token):
            return text
    return json.dumps(text)


def tool_call_constraint(
    tools: Sequence[Any],
    tool_choice: Any,
    *,
    parallel_tool_calls: bool = False,
    tokenizer: ConstraintTokenizer | None = None,
) -> ConstraintSpec | None:
    """The constraint for a chat request's tool calls, or None when tool calls are not wanted or free.

    ``tool_choice`` is ``"required"``, ``"auto"``, ``"none"`` or ``{"type": "function", "function": {"name": N}}``.
    """
    if not tools or tool_choice == "none":
        return None
    functions = [_function(tool) for tool in tools]
    name = _named(tool_choice)
    if name is not None:
        functions = [f for f in functions if f["name"] == name]
        if not functions:
            raise ConstraintError(f"tool_choice names the function {name!r}, which is not among the tools")
    elif tool_choice not in ("required", "auto"):
        return None
    schema: dict[str, Any] = {"anyOf": [_call_schema(f) for f in functions], "x-guidance": JSON_OPTIONS}
    if len(functions) == 1:
        schema = {**_call_schema(functions[0]), "x-guidance": JSON_OPTIONS}
    open_, close = _marker(OPEN, tokenizer), _marker(CLOSE, tokenizer)
    repeat = ' ("\\n" call)*' if parallel_tool_calls else ""
    lark = (
        "%llguidance {}\n"
        f"start: call{repeat}\n"
        f'call: {open_} "\\n" body "\\n" {close}\n'
        f"body: %json {json.dumps(schema)}\n"
    )
    lazy = tool_choice == "auto" and name is None
    triggers = (Trigger(TriggerType.WORD, OPEN),) if lazy else ()
    if lazy and tokenizer is not None:
        token = tokenizer.single_token(OPEN)
        if token is not None:
            triggers = (Trigger(TriggerType.TOKEN, OPEN, token),)
    return ConstraintSpec("lark", lark, origin="tools", lazy=lazy, triggers=triggers, preserved_tokens=(OPEN, CLOSE))

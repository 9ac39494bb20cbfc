"""Tool-call forcing: a grammar for the model's own tool-call format (engine.chat.tool_grammar; Hermes'
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` unless the template says otherwise).

With ``tool_choice: "required"`` (or a named function) the answer must be a call, so the grammar applies from
the first token; with ``"auto"`` it is lazy and wakes at the format's opening marker, so that a call the model
starts on its own always parses. Arguments are constrained by each function's ``parameters`` schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mlxd.engine.chat.formats import FORMATS
from mlxd.engine.chat.tool_grammar import call_grammar, separator
from mlxd.engine.constrain.compile import JSON_OPTIONS
from mlxd.engine.constrain.errors import ConstraintError
from mlxd.engine.constrain.spec import ConstraintSpec, Trigger, TriggerType
from mlxd.engine.constrain.tokenizer import ConstraintTokenizer



def _function(tool: Any) -> Mapping[str, Any]:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ConstraintError('tools: each tool must be {"type": "function", "function": {"name": ..., ...}}')
    return function


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


def _start_marker(fmt: str) -> str:
    if fmt == "llama3":
        return '{"'
    return FORMATS[fmt].start


def tool_call_constraint(
    tools: Sequence[Any],
    tool_choice: Any,
    *,
    parallel_tool_calls: bool = False,
    tokenizer: ConstraintTokenizer | None = None,
    tool_call_format: str = "hermes",
    reasoning_close: str | None = None,
) -> ConstraintSpec | None:
    """The constraint for a chat request's tool calls, or None when tool calls are not wanted or free.

    ``tool_choice`` is ``"required"``, ``"auto"``, ``"none"`` or ``{"type": "function", "function": {"name": N}}``;
    ``tool_call_format`` names the format the model writes calls in (engine.chat.tool_call_format).
    ``reasoning_close`` is the tag that ends the reasoning block the prompt left open (DeepSeek R1, GLM 4.7 open
    ``<think>`` in their generation prompt): a forced call first closes it, leaving the reasoning empty.
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

    def marker(text: str) -> str:
        return _marker(text, tokenizer)

    def as_json(schema: Mapping[str, Any]) -> str:
        return f"%json {json.dumps({**schema, 'x-guidance': JSON_OPTIONS})}"

    try:
        alternatives = [call_grammar(tool_call_format, f, marker, as_json) for f in functions]
    except ValueError as exc:
        raise ConstraintError(str(exc)) from exc
    repeat = f" ({separator(tool_call_format)} call)*" if parallel_tool_calls else ""
    lazy = tool_choice == "auto" and name is None
    opening = f'{marker(reasoning_close)} "\\n\\n" ' if reasoning_close and not lazy else ""
    lark = ("%llguidance {}\n" + f"start: {opening}call{repeat}\n" + "call: " + "\n    | ".join(alternatives)
            + "\n")
    start = _start_marker(tool_call_format)
    triggers = (Trigger(TriggerType.WORD, start),) if lazy else ()
    if lazy and tokenizer is not None:
        token = tokenizer.single_token(start)
        if token is not None:
            triggers = (Trigger(TriggerType.TOKEN, start, token),)
    return ConstraintSpec("lark", lark, origin="tools", lazy=lazy, triggers=triggers, preserved_tokens=(start,))

"""Constrained output for the generation routes: which constraint a request asks for, compiled before it is queued.

Native bodies (``/completion``, ``/infill``) read ``json_schema``/``grammar`` and their lazy triggers; OpenAI-,
Anthropic- and Responses-shaped bodies also read ``response_format`` and force tool calls for
``tool_choice: "required"`` or a named function. A constraint that does not compile is a 400 before any token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from mlxd.api.planning import Plan, config_value
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.engine import tool_call_format
from mlxd.engine import ConstraintSpec, ServerConstraint, chat_constraint, request_constraint, server_constraint

# Fields that can make a request constrained; without any of them (and no server default) nothing is compiled.
_FIELDS = ("json_schema", "grammar", "grammar_lazy", "grammar_triggers", "preserved_tokens", "response_format")

_SERVER: dict[int, tuple[Any, ServerConstraint]] = {}


def server_default(state: ServingState) -> ServerConstraint:
    """``--grammar``/``--grammar-file``/``--json-schema``/``--json-schema-file``, read once per configuration."""
    config = state.config
    cached = _SERVER.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    default = server_constraint(
        grammar=config_value(state, "grammar", None),
        grammar_file=config_value(state, "grammar_file", None),
        json_schema=config_value(state, "json_schema", None),
        json_schema_file=config_value(state, "json_schema_file", None),
    )
    _SERVER.clear()
    _SERVER[id(config)] = (config, default)
    return default


def _wants(body: Mapping[str, Any], server: ServerConstraint, *, chat: bool) -> bool:
    if server.spec is not None or server.error is not None:
        return True
    if chat and body.get("tools"):
        return True
    return any(body.get(name) not in (None, False, "", []) for name in _FIELDS)


async def constrain(p: Plan, body: Mapping[str, Any], state: ServingState, model: ServedModel, *,
                    chat: bool, reasoning_close: str | None = None) -> Plan:
    """Give the plan the request's constraint, compiled (none for free generation); raises the 400.

    ``reasoning_close``: the tag that closes the reasoning block a chat prompt left open, which a forced tool
    call must write first."""
    server = server_default(state)
    if not _wants(body, server, chat=chat):
        return p
    # The first use builds llguidance's view of the vocabulary: not on the event loop.
    compiler = await asyncio.to_thread(lambda: model.worker.constraints.compiler)
    spec: ConstraintSpec | None
    if chat:
        template = model.chat_template
        fmt = tool_call_format(template.source) if template is not None and template.builtin is None else "hermes"
        spec = chat_constraint(body, server, compiler.tokenizer, tool_call_format=fmt,
                               reasoning_close=reasoning_close)
    else:
        spec = request_constraint(body, server, compiler.tokenizer)
    if spec is not None:
        p.constraint_spec = spec
        p.constraint = await asyncio.to_thread(compiler.compile, spec)
    return p

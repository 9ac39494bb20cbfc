"""Where a constraint comes from: server options, native request fields and OpenAI's ``response_format``.

b10621's rules (tools/server/server-schema.cpp): a request takes the JSON-schema branch only when ``json_schema``
is present and ``grammar`` is absent; otherwise ``grammar`` (a string) with ``grammar_lazy`` applies, and a
``grammar`` that is not a string is ignored in favour of the server default. ``preserved_tokens`` and
``grammar_triggers`` are read in either branch. A JSON null counts as absent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxd.engine.constrain.compile import schema_source, validate
from mlxd.engine.constrain.errors import ConstraintError
from mlxd.engine.constrain.spec import ConstraintSpec, Trigger, TriggerType
from mlxd.engine.constrain.tokenizer import ConstraintTokenizer
from mlxd.engine.constrain.tools import tool_call_constraint
from mlxd.errors import InvalidRequest


@dataclass(frozen=True)
class ServerConstraint:
    """The server-wide default constraint (``--grammar`` & co.), applied to requests that bring none.

    A ``--grammar`` that does not compile does not stop the server (b10621 reports it when a request uses it):
    ``error`` holds the diagnostic and every request that falls back to the default is refused with it.
    """

    spec: ConstraintSpec | None = None
    error: ConstraintError | None = None

    def default(self) -> ConstraintSpec | None:
        """The default spec for a request, or the startup diagnostic raised again."""
        if self.error is not None:
            raise ConstraintError(self.error.message)
        return self.spec


def _read_file(path: str, option: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConstraintError(f"{option}: cannot read {path}: {exc.strerror or exc}") from exc


def server_constraint(
    grammar: str | None = None,
    grammar_file: str | None = None,
    json_schema: str | None = None,
    json_schema_file: str | None = None,
) -> ServerConstraint:
    """The default constraint from the four options; raises ConstraintError where b10621 refuses to start.

    An unreadable file or a JSON schema that does not parse or compile stops startup; a GBNF grammar that does
    not compile is kept as the error of every request that uses it. b10621 lets the last of these options on
    the command line win; a layered configuration has no such order, so giving more than one is refused.
    """
    given = {
        name: value
        for name, value in (
            ("--grammar", grammar),
            ("--grammar-file", grammar_file),
            ("--json-schema", json_schema),
            ("--json-schema-file", json_schema_file),
        )
        if value is not None
    }
    if len(given) > 1:
        raise ConstraintError(f"give one of {', '.join(given)}: each replaces the others' constraint")
    if not given:
        return ServerConstraint()
    (option, value), = given.items()
    text = _read_file(value, option) if option.endswith("-file") else value
    if option.startswith("--json-schema"):
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"{option}: the JSON schema does not parse: {exc}") from exc
        spec = ConstraintSpec("json_schema", schema_source(schema), origin=option)
        validate(spec)  # raises: a schema that does not convert stops startup, as in b10621
        return ServerConstraint(spec=spec)
    if not text:
        return ServerConstraint()
    spec = ConstraintSpec("gbnf", text, origin=option)
    try:
        validate(spec)
    except ConstraintError as exc:
        return ServerConstraint(spec=spec, error=exc)
    return ServerConstraint(spec=spec)


def _present(body: Mapping[str, Any], name: str) -> bool:
    return body.get(name) is not None


def _preserved(body: Mapping[str, Any], tokenizer: ConstraintTokenizer | None) -> tuple[tuple[str, ...], set[int]]:
    value = body.get("preserved_tokens")
    if value is None:
        return (), set()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidRequest("preserved_tokens must be an array of strings")
    ids: set[int] = set()
    if tokenizer is not None:
        for text in value:
            # A string that is not one token is not preserved (b10621 logs and skips it).
            token = tokenizer.single_token(text)
            if token is not None:
                ids.add(token)
    return tuple(value), ids


def _trigger(item: Any, preserved: set[int], tokenizer: ConstraintTokenizer | None) -> Trigger:
    if not isinstance(item, Mapping) or not isinstance(item.get("value"), str):
        raise InvalidRequest('each grammar trigger must be an object {"type": N, "value": "..."}')
    kind_value = item.get("type")
    if kind_value is None:
        raise InvalidRequest("Unknown grammar trigger type")
    try:
        kind = TriggerType(kind_value)
    except ValueError as exc:
        raise InvalidRequest("Unknown grammar trigger type") from exc
    value: str = item["value"]
    if kind is TriggerType.TOKEN:
        token = item.get("token")
        if not isinstance(token, int):
            raise InvalidRequest("a token grammar trigger needs an integer 'token'")
        return Trigger(kind, value, token)
    if kind is TriggerType.WORD and tokenizer is not None:
        token = tokenizer.single_token(value)
        if token is not None:
            # A word that is one token triggers on that token, and must be preserved to be sampled whole.
            if token not in preserved:
                raise InvalidRequest(f"Grammar trigger word should be marked as preserved token: {value}")
            return Trigger(TriggerType.TOKEN, value, token)
    return Trigger(kind, value)


def _triggers(
    body: Mapping[str, Any], preserved: set[int], tokenizer: ConstraintTokenizer | None
) -> tuple[Trigger, ...]:
    value = body.get("grammar_triggers")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidRequest("grammar_triggers must be an array of trigger objects")
    return tuple(_trigger(item, preserved, tokenizer) for item in value)


def request_constraint(
    body: Mapping[str, Any],
    server: ServerConstraint | None = None,
    tokenizer: ConstraintTokenizer | None = None,
) -> ConstraintSpec | None:
    """The constraint of a native request body (``json_schema``, ``grammar``, ``grammar_lazy``, triggers).

    ``tokenizer`` resolves word triggers and preserved tokens; without it word triggers stay text patterns.
    """
    preserved_texts, preserved_ids = _preserved(body, tokenizer)
    triggers = _triggers(body, preserved_ids, tokenizer)
    if _present(body, "json_schema") and not _present(body, "grammar"):
        schema = body["json_schema"]
        if not isinstance(schema, (Mapping, bool)):
            raise ConstraintError('"json_schema": the schema must be a JSON object')
        return ConstraintSpec("json_schema", schema_source(schema), origin="json_schema")
    grammar = body.get("grammar")
    spec: ConstraintSpec | None
    if isinstance(grammar, str):
        spec = ConstraintSpec("gbnf", grammar, origin="grammar") if grammar else None
    else:
        spec = server.default() if server is not None else None
    lazy = body.get("grammar_lazy")
    lazy = lazy if isinstance(lazy, bool) else False
    if lazy and not triggers:
        raise InvalidRequest("Error: no triggers set for lazy grammar!")
    if spec is None:
        return None
    return ConstraintSpec(
        spec.kind, spec.source, spec.origin, lazy=lazy, triggers=triggers, preserved_tokens=preserved_texts
    )


def response_format_schema(response_format: Any) -> Any | None:
    """The JSON schema an OpenAI ``response_format`` asks for, or None for plain text (b10621's reading)."""
    if not isinstance(response_format, Mapping) or "type" not in response_format:
        return None
    kind = response_format.get("type")
    kind = kind if isinstance(kind, str) else ""
    if kind == "json_object":
        schema = response_format.get("schema")
        return schema if schema is not None else {}
    if kind == "json_schema":
        wrapper = response_format.get("json_schema")
        schema = wrapper.get("schema") if isinstance(wrapper, Mapping) else None
        return schema if schema is not None else {}
    if kind and kind != "text":
        raise InvalidRequest(
            f'response_format type must be one of "text" or "json_object", but got: {kind}'
        )
    return None


def chat_constraint(
    body: Mapping[str, Any],
    server: ServerConstraint | None = None,
    tokenizer: ConstraintTokenizer | None = None,
    tool_call_format: str = "hermes",
    reasoning_close: str | None = None,
) -> ConstraintSpec | None:
    """The constraint of an OpenAI-style chat body: ``response_format`` (or ``json_schema``), ``grammar``, tools
    (in the model's ``tool_call_format``).

    ``response_format`` replaces a ``json_schema`` field; a schema and a grammar together are refused; a schema
    takes precedence over tool-call forcing. Otherwise the tools' grammar (forced for ``"required"`` or a named
    function, lazy at ``<tool_call>`` for ``"auto"``) applies, then the native fields and the server default.
    """
    schema = response_format_schema(body.get("response_format"))
    if schema is None:
        schema = body.get("json_schema")
    if schema is not None:
        if _present(body, "grammar"):
            raise InvalidRequest("Cannot use both json_schema and grammar")
        return request_constraint({"json_schema": schema}, server, tokenizer)
    tools = body.get("tools")
    parallel = body.get("parallel_tool_calls") is True
    forced = tool_call_constraint(
        tools if isinstance(tools, list) else [],
        body.get("tool_choice", "auto"),
        parallel_tool_calls=parallel,
        tokenizer=tokenizer,
        tool_call_format=tool_call_format,
        reasoning_close=reasoning_close,
    )
    if forced is not None and isinstance(body.get("grammar"), str) and body["grammar"]:
        raise InvalidRequest("Cannot use custom grammar constraints with tools.")
    return forced if forced is not None else request_constraint(body, server, tokenizer)

"""Which constraint a request gets: b10621's precedence between json_schema, grammar and the server default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.constrain import (
    ConstraintError,
    ConstraintSpec,
    ConstraintTokenizer,
    ServerConstraint,
    Trigger,
    TriggerType,
    chat_constraint,
    request_constraint,
    response_format_schema,
    server_constraint,
    tool_call_constraint,
)
from mlxd.errors import InvalidRequest, MlxdError

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
GBNF = 'root ::= "yes" | "no"'


def test_json_schema_alone_takes_the_schema_branch() -> None:
    spec = request_constraint({"json_schema": SCHEMA})
    assert spec is not None and spec.kind == "json_schema" and json.loads(spec.source) == SCHEMA


def test_grammar_beside_json_schema_wins() -> None:
    # b10621 takes the schema branch only when json_schema is present and grammar is absent.
    spec = request_constraint({"json_schema": SCHEMA, "grammar": GBNF})
    assert spec == ConstraintSpec("gbnf", GBNF, origin="grammar")


def test_null_json_schema_counts_as_absent() -> None:
    assert request_constraint({"json_schema": None, "grammar": GBNF}) == ConstraintSpec("gbnf", GBNF, "grammar")
    assert request_constraint({"json_schema": None}) is None


def test_a_non_string_grammar_is_ignored_for_the_server_default() -> None:
    server = server_constraint(grammar='root ::= "x"')
    assert request_constraint({"grammar": 42}, server) == server.spec
    assert request_constraint({"grammar": {"a": 1}}) is None


def test_no_field_uses_the_server_default_and_an_empty_grammar_clears_it() -> None:
    server = server_constraint(json_schema=json.dumps(SCHEMA))
    assert request_constraint({}, server) == server.spec
    assert request_constraint({"grammar": ""}, server) is None


def test_grammar_lazy_needs_triggers() -> None:
    with pytest.raises(InvalidRequest, match="no triggers set for lazy grammar"):
        request_constraint({"grammar": GBNF, "grammar_lazy": True})


def test_grammar_lazy_is_read_only_in_the_grammar_branch() -> None:
    spec = request_constraint({"json_schema": SCHEMA, "grammar_lazy": True})
    assert spec is not None and not spec.lazy


def test_triggers_are_parsed_with_llama_cpp_numbering(ctok: ConstraintTokenizer) -> None:
    body = {
        "grammar": GBNF,
        "grammar_lazy": True,
        "grammar_triggers": [
            {"type": 0, "value": "<tool_call>", "token": 2042},
            {"type": 1, "value": "call me"},
            {"type": 2, "value": r"\{"},
            {"type": 3, "value": r"^\s*\{"},
        ],
    }
    spec = request_constraint(body, tokenizer=ctok)
    assert spec is not None and spec.lazy
    assert spec.triggers == (
        Trigger(TriggerType.TOKEN, "<tool_call>", 2042),
        Trigger(TriggerType.WORD, "call me"),
        Trigger(TriggerType.PATTERN, r"\{"),
        Trigger(TriggerType.PATTERN_FULL, r"^\s*\{"),
    )


def test_a_one_token_trigger_word_must_be_preserved(ctok: ConstraintTokenizer) -> None:
    body = {"grammar": GBNF, "grammar_lazy": True, "grammar_triggers": [{"type": 1, "value": "<tool_call>"}]}
    with pytest.raises(InvalidRequest, match="should be marked as preserved token: <tool_call>"):
        request_constraint(body, tokenizer=ctok)
    spec = request_constraint({**body, "preserved_tokens": ["<tool_call>"]}, tokenizer=ctok)
    assert spec is not None
    assert spec.triggers == (Trigger(TriggerType.TOKEN, "<tool_call>", ctok.single_token("<tool_call>")),)


def test_an_unknown_trigger_type_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="Unknown grammar trigger type"):
        request_constraint({"grammar": GBNF, "grammar_triggers": [{"type": 7, "value": "x"}]})


def test_a_json_schema_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ConstraintError, match='^"json_schema": '):
        request_constraint({"json_schema": "not a schema"})


@pytest.mark.parametrize(
    ("response_format", "schema"),
    [
        ({"type": "json_object"}, {}),
        ({"type": "json_object", "schema": SCHEMA}, SCHEMA),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}, SCHEMA),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, {}),
        ({"type": "text"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_response_format_gives_b10621s_schema(response_format: Any, schema: Any) -> None:
    assert response_format_schema(response_format) == schema


def test_an_unknown_response_format_type_is_refused() -> None:
    with pytest.raises(InvalidRequest, match='must be one of "text" or "json_object", but got: yaml'):
        response_format_schema({"type": "yaml"})


def test_server_grammar_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "g.gbnf"
    path.write_text(GBNF)
    assert server_constraint(grammar_file=str(path)).spec == ConstraintSpec("gbnf", GBNF, "--grammar-file")


def test_server_json_schema_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA))
    spec = server_constraint(json_schema_file=str(path)).spec
    assert spec is not None and spec.kind == "json_schema" and spec.origin == "--json-schema-file"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"json_schema": "{not json"}, "--json-schema: the JSON schema does not parse"),
        ({"json_schema": '{"type": "nope"}'}, '"--json-schema": Invalid type: nope'),
        ({"grammar_file": "/nonexistent/g.gbnf"}, "--grammar-file: cannot read /nonexistent/g.gbnf"),
        ({"json_schema_file": "/nonexistent/s.json"}, "--json-schema-file: cannot read"),
        ({"grammar": GBNF, "json_schema": "{}"}, "give one of --grammar, --json-schema"),
    ],
)
def test_server_options_that_stop_startup(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConstraintError) as info:
        server_constraint(**kwargs)
    assert message in info.value.message
    assert isinstance(info.value, MlxdError)


def test_a_bad_server_grammar_is_kept_and_refuses_each_request_that_uses_it() -> None:
    server = server_constraint(grammar="root ::= missing")
    assert isinstance(server, ServerConstraint) and server.error is not None
    assert "Rule 'missing' not found" in server.error.message
    with pytest.raises(ConstraintError, match="Rule 'missing' not found"):
        request_constraint({"prompt": "x"}, server)
    # A request that brings its own grammar is not affected.
    assert request_constraint({"grammar": GBNF}, server) == ConstraintSpec("gbnf", GBNF, "grammar")


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def test_tool_choice_required_forces_a_call_and_auto_waits_for_the_marker(ctok: ConstraintTokenizer) -> None:
    required = tool_call_constraint(TOOLS, "required", tokenizer=ctok)
    assert required is not None and not required.lazy and required.kind == "lark"
    auto = tool_call_constraint(TOOLS, "auto", tokenizer=ctok)
    assert auto is not None and auto.lazy and auto.triggers[0].type is TriggerType.TOKEN
    assert tool_call_constraint(TOOLS, "none") is None
    assert tool_call_constraint([], "required") is None


def test_a_named_tool_choice_must_name_a_tool() -> None:
    with pytest.raises(ConstraintError, match="'g', which is not among the tools"):
        tool_call_constraint(TOOLS, {"type": "function", "function": {"name": "g"}})


def test_chat_response_format_replaces_json_schema_and_refuses_a_grammar_beside_it() -> None:
    response_format = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    body = {"json_schema": {"type": "string"}, "response_format": response_format}
    spec = chat_constraint(body)
    assert spec is not None and json.loads(spec.source) == SCHEMA
    with pytest.raises(InvalidRequest, match="Cannot use both json_schema and grammar"):
        chat_constraint({**body, "grammar": GBNF})


def test_chat_tools_force_calls_unless_a_schema_is_asked_for(ctok: ConstraintTokenizer) -> None:
    spec = chat_constraint({"tools": TOOLS, "tool_choice": "required"}, tokenizer=ctok)
    assert spec is not None and spec.origin == "tools" and not spec.lazy
    spec = chat_constraint({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}})
    assert spec is not None and spec.kind == "json_schema"
    with pytest.raises(InvalidRequest, match="custom grammar constraints with tools"):
        chat_constraint({"tools": TOOLS, "tool_choice": "required", "grammar": GBNF})


def test_chat_without_tools_or_formats_falls_back_to_the_native_fields_and_default() -> None:
    server = server_constraint(grammar=GBNF)
    assert chat_constraint({"messages": []}, server) == server.spec
    assert chat_constraint({"tools": TOOLS, "tool_choice": "none"}, server) == server.spec

"""Compiling constraints: the parser's message on failure, typed for a 400, and bounded source and work."""

from __future__ import annotations

from typing import Any

import pytest

from mlxd.engine.constrain import (
    ConstraintCompiler,
    ConstraintError,
    ConstraintSpec,
    ConstraintTokenizer,
    schema_source,
)
from mlxd.engine.constrain.compile import MAX_SOURCE_BYTES, validate
from mlxd.errors import InvalidRequest


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('root ::= "yes', "grammar: failed to parse grammar: Unexpected end of input"),
        ("root ::= missing", "grammar: failed to parse grammar: Rule 'missing' not found"),
        ('item ::= "a"', "grammar: failed to parse grammar: No 'root' rule found"),
        ("root ::= [a-", "grammar: failed to parse grammar: Unexpected end of input"),
    ],
)
def test_a_gbnf_grammar_that_does_not_parse_is_a_400_with_the_parsers_message(
    ccompiler: ConstraintCompiler, source: str, message: str
) -> None:
    with pytest.raises(ConstraintError) as info:
        ccompiler.compile(ConstraintSpec("gbnf", source, origin="grammar"))
    assert info.value.message.startswith(message)
    assert isinstance(info.value, InvalidRequest)
    assert (info.value.status, info.value.type) == (400, "invalid_request_error")


def test_a_lark_grammar_error_keeps_the_diagnosis_without_the_source_drawing(ccompiler: ConstraintCompiler) -> None:
    with pytest.raises(ConstraintError) as info:
        ccompiler.compile(ConstraintSpec("lark", "start: /[/", origin="grammar"))
    assert info.value.message == (
        'grammar: failed to parse grammar: at 1(8): invalid regex "[" (in regex): regex parse error: '
        "error: unclosed character class"
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "nope"}, '"json_schema": Invalid type: nope'),
        ({"$ref": "#/definitions/missing"}, "\"json_schema\": Pointer '/definitions/missing' does not exist"),
        ({"type": "string", "format": "weird"}, '"json_schema": Unknown format: weird'),
        # A keyword llguidance cannot enforce is refused, never silently dropped.
        ({"type": "array", "uniqueItems": True}, '"json_schema": Unimplemented keys: ["uniqueItems"]'),
    ],
)
def test_a_json_schema_that_does_not_compile_is_a_400_with_the_parsers_message(
    ccompiler: ConstraintCompiler, schema: Any, message: str
) -> None:
    spec = ConstraintSpec("json_schema", schema_source(schema), origin="json_schema")
    with pytest.raises(ConstraintError) as info:
        ccompiler.compile(spec)
    assert info.value.message == message
    with pytest.raises(ConstraintError):
        validate(spec)  # the same refusal without a tokenizer, as at startup


def test_the_source_size_is_bounded(ccompiler: ConstraintCompiler) -> None:
    source = 'root ::= "' + "a" * MAX_SOURCE_BYTES + '"'
    with pytest.raises(ConstraintError, match=f"limit of {MAX_SOURCE_BYTES} bytes"):
        ccompiler.compile(ConstraintSpec("gbnf", source, origin="grammar"))


def test_the_compile_work_is_bounded(ccompiler: ConstraintCompiler) -> None:
    # Each rule doubles the one below: a lexer of 2^30 states, refused by the fuel limit instead of built.
    rules = "\n".join(f'x{i} ::= x{i + 1} x{i + 1}' for i in range(30))
    source = f'root ::= x0\n{rules}\nx30 ::= "a"'
    with pytest.raises(ConstraintError, match="too big"):
        ccompiler.compile(ConstraintSpec("gbnf", source, origin="grammar"))


def test_a_source_compiles_once_and_requests_get_fresh_matchers(ccompiler: ConstraintCompiler) -> None:
    spec = ConstraintSpec("gbnf", 'root ::= "a" "b"', origin="grammar")
    first, second = ccompiler.compile(spec), ccompiler.compile(spec)
    assert first.pristine is second.pristine
    one, two = first.new_matcher(), first.new_matcher()
    assert one is not two and not one.is_error()


def test_a_gbnf_rule_named_start_is_read_as_gbnf(ccompiler: ConstraintCompiler, ctok: ConstraintTokenizer) -> None:
    # Not mistaken for Lark, and not clashing with the converter's own name for the root rule; the string
    # "start" and the comment keep their text.
    source = 'root ::= start " start" # start\nstart ::= "go" [s]'
    matcher = ccompiler.compile(ConstraintSpec("gbnf", source, origin="grammar")).new_matcher()
    assert matcher.consume_tokens(ctok.ll.tokenize_str("gos start"))
    assert matcher.is_accepting()


def test_a_lark_grammar_is_accepted_where_a_gbnf_one_is(ccompiler: ConstraintCompiler) -> None:
    compiled = ccompiler.compile(ConstraintSpec("gbnf", '%llguidance {}\nstart: "a" | "b"', origin="grammar"))
    assert "start" in compiled.grammar


def test_an_empty_schema_asks_for_an_object(ccompiler: ConstraintCompiler, ctok: ConstraintTokenizer) -> None:
    # b10621's converter reads {} (what response_format json_object without a schema gives) as its object rule.
    assert schema_source({}) == '{"type":"object"}'
    assert schema_source({"description": "any value"}) == '{"description":"any value"}'  # only {} itself
    compiled = ccompiler.compile(ConstraintSpec("json_schema", schema_source({}), origin="json_schema"))
    number = compiled.new_matcher()
    assert not number.consume_tokens(ctok.ll.tokenize_str("42")) or not number.is_accepting()
    obj = compiled.new_matcher()
    assert obj.consume_tokens(ctok.ll.tokenize_str('{"a": 1}')) and obj.is_accepting()

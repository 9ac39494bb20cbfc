"""Constrained decoding on the tiny random-weight checkpoint: only the mask can make the output valid."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from mlxd.engine.constrain import (
    ConstraintSpec,
    ConstraintTokenizer,
    Trigger,
    TriggerType,
    request_constraint,
    response_format_schema,
    schema_source,
    tool_call_constraint,
)

from tests.constraint_cases import (
    BOUNDED_OBJECT,
    GBNF,
    GBNF_LINE,
    SCHEMA,
    SEEDS,
    validate_bounded_object,
    validate_record,
)

# The ``decode`` fixture (conftest.py): one batch, one row per spec, returning each row's Generation.
Decode = Callable[..., list[Any]]


def test_gbnf_grammar_holds_for_every_seed(decode: Decode) -> None:
    spec = request_constraint({"grammar": GBNF})
    results = decode([spec] * len(SEEDS), SEEDS)
    for result in results:
        assert result.finished_by_grammar
        assert GBNF_LINE.fullmatch(result.text), result.text
    assert len({r.text for r in results}) > 1  # the seeds really sample


def test_json_schema_output_parses_and_validates_for_every_seed(decode: Decode) -> None:
    spec = request_constraint({"json_schema": SCHEMA})
    for result in decode([spec] * len(SEEDS), SEEDS):
        assert result.finished_by_grammar
        validate_record(json.loads(result.text))


def test_response_format_json_object_parses_for_every_seed(decode: Decode) -> None:
    schema = response_format_schema({"type": "json_object", "schema": BOUNDED_OBJECT})
    spec = ConstraintSpec("json_schema", schema_source(schema), origin="response_format")
    for result in decode([spec] * len(SEEDS), SEEDS):
        assert result.finished_by_grammar, result.text
        validate_bounded_object(json.loads(result.text))


def test_response_format_json_schema_validates(decode: Decode) -> None:
    schema = response_format_schema({"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}})
    spec = ConstraintSpec("json_schema", schema_source(schema), origin="response_format")
    for result in decode([spec] * 4, SEEDS[:4]):
        validate_record(json.loads(result.text))


def test_unconstrained_rows_match_their_solo_runs_in_a_mixed_batch(decode: Decode) -> None:
    spec = request_constraint({"json_schema": SCHEMA})
    solo = decode([None], [None])[0]
    mixed = decode([spec, None, spec], [0, None, 1])
    assert mixed[1].tokens == solo.tokens
    validate_record(json.loads(mixed[0].text))


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"enum": ["paris", "oslo"]}, "days": {"type": "integer", "maximum": 9}},
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        },
    },
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "additionalProperties": False}}},
]
TOOL_CALL = re.compile(r"<tool_call>\n(.*)\n</tool_call>", re.S)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_calls_always_parse(decode: Decode, constraint_tokenizer: ConstraintTokenizer, choice: Any) -> None:
    spec = tool_call_constraint(TOOLS, choice, tokenizer=constraint_tokenizer)
    for result in decode([spec] * 10, SEEDS[:10]):
        found = TOOL_CALL.fullmatch(result.text)
        assert found, result.text
        call = json.loads(found.group(1))
        assert call["name"] in ("get_weather", "noop")
        if isinstance(choice, dict):
            assert call["name"] == "get_weather"
        if call["name"] == "get_weather":
            assert call["arguments"]["city"] in ("paris", "oslo")


def _trigger_point(decode: Decode, constraint_tokenizer: ConstraintTokenizer) -> tuple[list[int], int]:
    """The greedy unconstrained run, and the index of a later token whose text is plain letters."""
    free = decode([None], [None], max_tokens=40)[0].tokens
    for i, token in enumerate(free[3:], start=3):
        if re.fullmatch(r" ?[A-Za-z_]+", constraint_tokenizer.token_bytes(token).decode()):
            return free, i
    raise AssertionError("no plain-text token in the unconstrained run")


@pytest.mark.parametrize("kind", [TriggerType.TOKEN, TriggerType.PATTERN])
def test_lazy_grammar_starts_at_its_trigger(
    decode: Decode, constraint_tokenizer: ConstraintTokenizer, kind: TriggerType
) -> None:
    free, at = _trigger_point(decode, constraint_tokenizer)
    word = constraint_tokenizer.token_bytes(free[at]).decode()
    trigger: dict[str, Any] = {"type": int(kind), "value": word}
    if kind is TriggerType.TOKEN:
        trigger["token"] = free[at]
    else:
        trigger["value"] = re.escape(word)
    body = {"grammar": f'root ::= {json.dumps(word)} "=" [0-9]{{1,3}} ";"', "grammar_lazy": True,
            "grammar_triggers": [trigger]}
    result = decode([request_constraint(body)], [None])[0]
    # Text before the trigger is the free run's, untouched; from the trigger on, the grammar rules.
    assert result.tokens[: at + 1] == free[: at + 1]
    assert result.finished_by_grammar
    prefix = constraint_tokenizer.ll.decode_str(free[:at])
    assert result.text.startswith(prefix)
    assert re.fullmatch(re.escape(word) + r"=[0-9]{1,3};", result.text[len(prefix):]), result.text


def test_lazy_tool_grammar_wakes_on_its_token(decode: Decode, constraint_tokenizer: ConstraintTokenizer) -> None:
    # With tool_choice auto the grammar waits for <tool_call>; a prompt that ends in text forces nothing until
    # the token appears, so here the call is started by replaying the token trigger directly.
    spec = tool_call_constraint(TOOLS, "auto", tokenizer=constraint_tokenizer)
    assert spec is not None and spec.lazy
    open_ = constraint_tokenizer.single_token("<tool_call>")
    assert spec.triggers == (Trigger(TriggerType.TOKEN, "<tool_call>", open_),)

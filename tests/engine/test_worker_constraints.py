"""Constrained decoding through the worker: masks in the batched step, the grammar's end ends the generation."""

from __future__ import annotations

import json
from typing import Any

from mlxd.engine.constrain import ConstraintSpec, schema_source
from mlxd.engine.types import ErrorEvent
from tests.engine.conftest import PROMPTS, final, greedy_request


def test_constrained_and_free_rows_share_a_batch(tiny_model: Any, make_worker) -> None:
    worker = make_worker(parallel=3)
    prompt = list(tiny_model.tokenizer.encode(PROMPTS[0]))
    free_solo = final(worker.submit(greedy_request(prompt, 12))).tokens
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    spec = ConstraintSpec("json_schema", schema_source(schema), origin="json_schema")
    gbnf = ConstraintSpec("gbnf", 'root ::= "yes" | "no"', origin="grammar")
    handles = [worker.submit(greedy_request(prompt, 64, constraint=spec)),
               worker.submit(greedy_request(prompt, 12)),
               worker.submit(greedy_request(prompt, 64, constraint=gbnf))]
    as_json, free, yes_no = (final(h) for h in handles)
    assert isinstance(json.loads(as_json.text)["ok"], bool) and as_json.stop_type == "eos"
    assert yes_no.text in ("yes", "no") and yes_no.stop_type == "eos"
    assert free.tokens == free_solo


def test_a_grammar_that_does_not_compile_fails_its_request(tiny_model: Any, make_worker) -> None:
    worker = make_worker(parallel=1)
    bad = ConstraintSpec("gbnf", "root ::= (", origin="grammar")
    error = worker.submit(greedy_request([5, 6, 7], 4, constraint=bad)).result()
    assert isinstance(error, ErrorEvent) and error.code == 400 and error.type == "invalid_request_error"
    assert final(worker.submit(greedy_request([5, 6, 7], 4))).tokens

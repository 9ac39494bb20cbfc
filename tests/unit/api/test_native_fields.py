"""Native request fields read with b10621's rules: aliases, null as absent, hard limits, type errors, refusals."""

from __future__ import annotations

import pytest

from mlxd.api.render.native import project
from mlxd.errors import InvalidRequest
from mlxd.schemas.completion import ServerDefaults, read_native_options

DEFAULTS = ServerDefaults(n_predict=64, n_keep=2, cache_prompt=False, sse_ping_interval=5, n_parallel=2)


def test_defaults_come_from_the_server() -> None:
    opts = read_native_options({"n_predict": None, "cache_prompt": None}, DEFAULTS)
    assert (opts.n_predict, opts.n_keep, opts.cache_prompt, opts.sse_ping_interval) == (64, 2, False, 5)


@pytest.mark.parametrize("body,expected", [
    ({"max_tokens": 3}, 3), ({"max_completion_tokens": 4, "max_tokens": 3}, 4), ({"n_predict": 5, "max_tokens": 3}, 5),
    ({"n_predict": True}, 1), ({"n_predict": 7.9}, 7),
])
def test_n_predict_aliases_and_conversions(body: dict, expected: int) -> None:
    assert read_native_options(body, DEFAULTS).n_predict == expected


@pytest.mark.parametrize("body,message", [
    ({"n_predict": "eight"}, "Field 'n_predict': [json.exception.type_error.302] type must be number, but is string"),
    ({"n_keep": -2}, "Field 'n_keep': Value must be between -1 <= value <= 2147483647, but got -2"),
    ({"n_cmpl": 3}, "Field 'n_cmpl': Value must be between 1 <= value <= 2, but got 3"),
    ({"return_tokens": "yes"}, "Field 'return_tokens': [json.exception.type_error.302] type must be boolean, "
                               "but is string"),
    ({"response_fields": [1]}, "Field 'response_fields': [json.exception.type_error.302] type must be string, "
                               "but is number"),
    ({"n_discard": -1}, "Field 'n_discard': Value must be between 0 <= value <= 2147483647, but got -1"),
    ({"t_max_predict_ms": -2}, "Field 't_max_predict_ms': Value must be between -1 <= value <= 9223372036854775807, "
                               "but got -2"),
    ({"sse_ping_interval": -5}, "Field 'sse_ping_interval': Value must be between -1 <= value <= 2147483647, "
                                "but got -5"),
])
def test_upstream_wording(body: dict, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        read_native_options(body, DEFAULTS)
    assert caught.value.message == message and caught.value.status == 400


@pytest.mark.parametrize("field,value", [
    ("echo", True), ("continue_final_message", {"prefix": "x"}), ("n_cache_reuse", 256),
])
def test_features_not_built_are_refused(field: str, value: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        read_native_options({field: value}, DEFAULTS)
    assert field in caught.value.message


@pytest.mark.parametrize("field,value", [("return_progress", False), ("reasoning_budget_tokens", -1),
                                         ("echo", False), ("continue_final_message", True)])
def test_inert_values_are_accepted(field: str, value: object) -> None:
    read_native_options({field: value}, DEFAULTS)


def test_reasoning_budget_fields_are_read() -> None:
    opts = read_native_options({"return_progress": True, "reasoning_budget_tokens": 10, "reasoning_control": True,
                                "reasoning_budget_start_tag": "<think>", "reasoning_budget_end_tag": "</think>",
                                "reasoning_budget_message": "M"}, DEFAULTS)
    assert opts.return_progress
    r = opts.reasoning
    assert (r.budget_tokens, r.start_tag, r.end_tags, r.message, r.control) == (10, "<think>", ("</think>",), "M", True)
    assert read_native_options({"reasoning_budget_end_tags": ["a", "", "b"], "reasoning_budget_end_tag": "c"},
                               DEFAULTS).reasoning.end_tags == ("a", "b")


def test_response_fields_projection() -> None:
    obj = {"content": "x", "timings": {"prompt_n": 3}, "stop": True}
    assert project(obj, ["content", "timings/prompt_n", "timings/missing", "absent"]) == {
        "content": "x", "timings/prompt_n": 3}

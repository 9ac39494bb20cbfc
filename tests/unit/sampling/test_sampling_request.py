"""A request's sampling fields evaluated with b10621's rules and wording."""

from __future__ import annotations

import math

import pytest

from mlxd.engine.sampling import DEFAULT_SAMPLERS, InvalidRequest, SamplingParams, apply_request

DEFAULTS = SamplingParams()


def parse(vocab, **fields) -> SamplingParams:
    return apply_request(fields, DEFAULTS, vocab)


def refused(vocab, **fields) -> str:
    with pytest.raises(InvalidRequest) as err:
        parse(vocab, **fields)
    return err.value.message


def test_absent_and_null_keep_defaults(vocab):
    assert parse(vocab) == DEFAULTS
    assert parse(vocab, temperature=None, top_k=None, samplers=None, logit_bias=None) == DEFAULTS


def test_defaults_come_from_the_server(vocab):
    server = SamplingParams(temperature=0.6, top_k=20)
    got = apply_request({"top_p": 0.5}, server, vocab)
    assert (got.temperature, got.top_k, got.top_p) == (0.6, 20, 0.5)


@pytest.mark.parametrize(("fields", "message"), [
    ({"repeat_last_n": -1}, "Field 'repeat_last_n': Value must be between 0 <= value <= 2147483647, but got -1"),
    ({"dry_penalty_last_n": -1},
     "Field 'dry_penalty_last_n': Value must be between 0 <= value <= 2147483647, but got -1"),
    ({"min_keep": -3}, "Field 'min_keep': Value must be between 0 <= value <= 2147483647, but got -3"),
    ({"adaptive_decay": 1.5},
     "Field 'adaptive_decay': Value must be between 0.000000 <= value <= 0.990000, but got 1.500000"),
    ({"top_k": "x"}, "Field 'top_k': [json.exception.type_error.302] type must be number, but is string"),
    ({"temperature": True}, "Field 'temperature': [json.exception.type_error.302] type must be number, but is boolean"),
    ({"post_sampling_probs": 1},
     "Field 'post_sampling_probs': [json.exception.type_error.302] type must be boolean, but is number"),
    ({"dry_sequence_breakers": []},
     "Field 'dry_sequence_breakers': Error: dry_sequence_breakers must be a non-empty array of strings"),
    ({"dry_sequence_breakers": "\n"},
     "Field 'dry_sequence_breakers': Error: dry_sequence_breakers must be a non-empty array of strings"),
    ({"samplers": ["top_k", 3]},
     "Field 'samplers': [json.exception.type_error.302] type must be string, but is number"),
])
def test_refusals_use_upstream_wording(vocab, fields, message):
    assert refused(vocab, **fields) == message


def test_first_bad_field_in_schema_order_is_reported(vocab):
    assert refused(vocab, min_keep=-1, repeat_last_n=-1).startswith("Field 'repeat_last_n'")


@pytest.mark.parametrize(("fields", "expected"), [
    ({"top_k": -5}, {"top_k": 0}),
    ({"top_p": 1.5}, {"top_p": 1.0}),
    ({"min_p": -0.1}, {"min_p": 0.0}),
    ({"temperature": -1}, {"temperature": 0.0}),
    ({"xtc_probability": 2}, {"xtc_probability": 1.0}),
    ({"mirostat": 7}, {"mirostat": 2}),
    ({"adaptive_target": 3.0}, {"adaptive_target": 1.0}),
    ({"top_k": 12.9}, {"top_k": 12}),  # an integer field truncates a float
    ({"dry_base": 0.5}, {"dry_base": 1.75}),  # below 1: the server's base
    ({"logprobs": 3}, {"n_probs": 3}),
    ({"n_probs": 2, "logprobs": 5}, {"n_probs": 2}),
])
def test_plain_limits_clamp(vocab, fields, expected):
    got = parse(vocab, **fields)
    for name, value in expected.items():
        assert getattr(got, name) == value


@pytest.mark.parametrize(("seed", "folded"), [(-1, 4294967295), (7, 7), (2**32 + 5, 5), (-2, 4294967294)])
def test_seed_folds_into_uint32(vocab, seed, folded):
    assert parse(vocab, seed=seed).seed == folded


def test_logit_bias_pairs(vocab):
    got = parse(vocab, logit_bias=[[1, 2.5], [2, False], ["hello", -1], [99, 1.0], [3, True], [4], "junk"])
    assert got.logit_bias == {1: 2.5, 2: -math.inf, vocab.id("hello"): -1.0}


def test_logit_bias_object_with_string_keys(vocab):
    got = parse(vocab, logit_bias={"1": 2.0, " 3": 1.0, "he": False, "abc": 0.5, "-1": 4.0})
    a, b, c = vocab.id("a"), vocab.id("b"), vocab.id("c")
    assert (a, c) == (1, 3)
    # "1" and " 3" read as ids (strtol skips leading space); "abc" is text; "-1" is an id out of range
    assert got.logit_bias == {a: 2.0 + 0.5, b: 0.5, c: 1.0 + 0.5, vocab.id("he"): -math.inf}


def test_logit_bias_repeated_tokens_add_up(vocab):
    assert parse(vocab, logit_bias=[[1, 1.0], ["a", 2.0]]).logit_bias == {vocab.id("a"): 3.0}


@pytest.mark.parametrize(("samplers", "expected"), [
    (["top_k", "temp", "nucleus", "bogus"], ("top_k", "temperature", "top_p")),
    ("kt", ("top_k", "temperature")),
    ("edskypmxt", DEFAULT_SAMPLERS),
    ("zq", ()),
    (42, DEFAULT_SAMPLERS),  # neither array nor string: ignored
])
def test_samplers(vocab, samplers, expected):
    assert parse(vocab, samplers=samplers).samplers == expected


def test_every_upstream_sampler_is_accepted(vocab):
    assert parse(vocab, samplers="ia").samplers == ("infill", "adaptive_p")


def test_breakers_and_flags(vocab):
    got = parse(vocab, dry_sequence_breakers=["xy", "\n"], ignore_eos=True, post_sampling_probs=True)
    assert got.dry_sequence_breakers == ("xy", "\n") and got.ignore_eos and got.post_sampling_probs

"""Server-wide sampling defaults: configuration options and explicit settings (generation_config.json is a
configuration source: tests/unit/config/test_checkpoint_source.py)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from mlxd.engine.sampling import DEFAULT_SAMPLERS, SamplingParams, defaults_from


def test_builtin_defaults_match_b10621():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.seed) == (0.8, 40, 0.95, 0.05, 4294967295)
    assert p.samplers == DEFAULT_SAMPLERS
    assert p.dry_sequence_breakers == ("\n", ":", '"', "*")


def test_params_are_frozen_and_closed():
    with pytest.raises(ValidationError):
        SamplingParams(temprature=1.0)
    with pytest.raises(ValidationError):
        SamplingParams(samplers=("top_k", "bogus"))
    with pytest.raises(ValidationError):
        SamplingParams().temperature = 1.0  # type: ignore[misc]


def test_the_explicit_spelling_beats_another_ones_default():
    got = defaults_from({"sampler-seq": "kt", "samplers": "top_k;temp;min-p"}, explicitly_set={"sampler-seq"})
    assert got.samplers == ("top_k", "temperature")


def test_option_spellings_and_formats():
    got = defaults_from({
        "samplers": "top_k;temp;min-p",
        "dry-sequence-breaker": ["none"],
        "logit-bias": ["15+1.5", "2-inf"],
        "seed": -1,
        "mirostat-lr": 0.2,
        "mirostat-ent": 3.0,
        "ctx-size": 4096,  # not a sampling option: ignored
    }, explicitly_set=set())
    assert got.samplers == ("top_k", "temperature", "min_p")
    assert got.dry_sequence_breakers == ()
    assert got.logit_bias == {15: 1.5, 2: -math.inf}
    assert (got.seed, got.mirostat_eta, got.mirostat_tau) == (4294967295, 0.2, 3.0)
    assert defaults_from({"sampler-seq": "kt"}, set()).samplers == ("top_k", "temperature")


def test_bad_logit_bias_option():
    with pytest.raises(ValueError, match="TOKEN_ID"):
        defaults_from({"logit-bias": ["15*2"]}, set())

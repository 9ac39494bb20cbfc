"""Server-wide sampling defaults: configuration options, generation_config, explicit settings."""

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


def test_generation_config_fills_unset_options():
    got = defaults_from({"temp": 0.8, "top-k": 40, "top-p": 0.95}, {"temperature": 0.6, "top_k": 20, "top_p": 0.9},
                        explicitly_set=set())
    assert (got.temperature, got.top_k, got.top_p) == (0.6, 20, 0.9)


def test_explicit_options_beat_generation_config():
    got = defaults_from({"temp": 1.0, "top-k": 40}, {"temperature": 0.6, "top_k": 20, "top_p": 0.9},
                        explicitly_set={"temp", "top-k"})
    assert (got.temperature, got.top_k, got.top_p) == (1.0, 40, 0.9)


def test_option_spellings_and_formats():
    got = defaults_from({
        "samplers": "top_k;temp;min-p",
        "dry-sequence-breaker": ["none"],
        "logit-bias": ["15+1.5", "2-inf"],
        "seed": -1,
        "mirostat-lr": 0.2,
        "mirostat-ent": 3.0,
        "ctx-size": 4096,  # not a sampling option: ignored
    }, None, explicitly_set=set())
    assert got.samplers == ("top_k", "temperature", "min_p")
    assert got.dry_sequence_breakers == ()
    assert got.logit_bias == {15: 1.5, 2: -math.inf}
    assert (got.seed, got.mirostat_eta, got.mirostat_tau) == (4294967295, 0.2, 3.0)
    assert defaults_from({"sampler-seq": "kt"}, None, set()).samplers == ("top_k", "temperature")


def test_bad_logit_bias_option():
    with pytest.raises(ValueError, match="TOKEN_ID"):
        defaults_from({"logit-bias": ["15*2"]}, None, set())

"""Server-wide sampling defaults: configuration options and explicit settings (generation_config.json is a
configuration source: tests/unit/config/test_checkpoint_source.py)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from mlxd.config import Config
from mlxd.engine.sampling import DEFAULT_SAMPLERS, SamplingParams
from mlxd.engine.sampling.defaults import sampling_defaults


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


def test_the_config_defaults_are_the_request_defaults():
    """The option table's defaults and SamplingParams' (b10621's request defaults) are the same values."""
    assert sampling_defaults(Config()) == SamplingParams()


def test_the_explicit_spelling_beats_another_ones_default():
    cfg = Config(sampling_seq="kt", samplers="top_k;temp;min-p")
    assert sampling_defaults(cfg, {"sampling-seq"}).samplers == ("top_k", "temperature")
    assert sampling_defaults(cfg, {"samplers"}).samplers == ("top_k", "temperature", "min_p")
    assert sampling_defaults(cfg, {"samplers", "sampling-seq"}).samplers == ("top_k", "temperature")


def test_option_formats():
    got = sampling_defaults(Config(samplers="top_k;temp;min-p", dry_sequence_breaker=["none"],
                                   logit_bias=["15+1.5", "2-inf"], seed=-1, mirostat_lr=0.2, mirostat_ent=3.0),
                            {"samplers"})
    assert got.samplers == ("top_k", "temperature", "min_p")
    assert got.dry_sequence_breakers == ()
    assert got.logit_bias == {15: 1.5, 2: -math.inf}
    assert (got.seed, got.mirostat_eta, got.mirostat_tau) == (4294967295, 0.2, 3.0)


def test_bad_logit_bias_option():
    with pytest.raises(ValueError, match="TOKEN_ID"):
        sampling_defaults(Config(logit_bias=["15*2"]))

"""The server-wide sampling defaults of a configuration: the one translation from the options (Config fields) to the
fields of native ``/completion`` (SamplingParams), whose names are b10621's request fields.

Read when a model loads and again on every live change (daemon.served.refresh), so its options' effect is ``live``.
The checkpoint's ``generation_config.json`` recommendations are already in the Config, as a source of its own.
"""

from __future__ import annotations

from collections.abc import Collection

from mlxd.config import Config
from mlxd.engine.sampling.params import (
    SamplingParams,
    parse_logit_bias_option,
    sampler_names_from_chars,
    sampler_names_from_list,
)


def sampling_defaults(cfg: Config, explicit: Collection[str] = frozenset()) -> SamplingParams:
    """The defaults a request starts from; ``explicit`` names the options some source set (it decides between
    ``--samplers`` and ``--sampler-seq``, which both give the chain)."""
    breakers = list(cfg.dry_sequence_breaker)
    return SamplingParams(
        temperature=cfg.temperature, dynatemp_range=cfg.dynatemp_range, dynatemp_exponent=cfg.dynatemp_exp,
        top_k=cfg.top_k, top_p=cfg.top_p, min_p=cfg.min_p, typical_p=cfg.typical_p, top_n_sigma=cfg.top_n_sigma,
        xtc_probability=cfg.xtc_probability, xtc_threshold=cfg.xtc_threshold,
        repeat_last_n=cfg.repeat_last_n, repeat_penalty=cfg.repeat_penalty,
        presence_penalty=cfg.presence_penalty, frequency_penalty=cfg.frequency_penalty,
        dry_multiplier=cfg.dry_multiplier, dry_base=cfg.dry_base, dry_allowed_length=cfg.dry_allowed_length,
        dry_penalty_last_n=cfg.dry_penalty_last_n,
        dry_sequence_breakers=() if breakers == ["none"] else tuple(breakers),
        mirostat=cfg.mirostat, mirostat_tau=cfg.mirostat_ent, mirostat_eta=cfg.mirostat_lr,
        adaptive_target=cfg.adaptive_target, adaptive_decay=cfg.adaptive_decay,
        seed=cfg.seed & 0xFFFFFFFF, logit_bias=parse_logit_bias_option(cfg.logit_bias),
        samplers=_chain(cfg, explicit), ignore_eos=cfg.ignore_eos, backend_sampling=cfg.backend_sampling,
    )


def _chain(cfg: Config, explicit: Collection[str]) -> tuple[str, ...]:
    # A source that set one of the two beats the other's default; when both or neither were set, --sampler-seq
    # (later in the option table) wins, as b10621 applies them in that order.
    if "samplers" in explicit and "sampling-seq" not in explicit:
        return sampler_names_from_list(cfg.samplers.split(";"))
    return sampler_names_from_chars(cfg.sampling_seq)

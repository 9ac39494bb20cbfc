"""The scheduler's view of the sampling chain (``mlxd.engine.sampling``): one sampler per request, one call per step."""

from __future__ import annotations

import math
from typing import Any, Sequence

import mlx.core as mx

from mlxd.engine.sampling import SampledToken, SamplingParams, TokenSampler, sample_batch
from mlxd.engine.types import GenerationRequest, TokenProb


class TokenizerVocab:
    """A tokenizer as the sampling chain reads it: plain encode/decode, vocabulary size, end-of-generation ids."""

    def __init__(self, tokenizer: Any, n_vocab: int, eog_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self.n_vocab = n_vocab
        self.eog_ids = tuple(eog_ids)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(ids)))


class ChainSampling:
    """llama.cpp's sampling chain for the scheduler: ``new`` per request, ``sample`` per batched step."""

    def __init__(self, vocab: TokenizerVocab, context_size: int) -> None:
        self.vocab = vocab
        self.context_size = context_size

    def new(self, request: GenerationRequest) -> TokenSampler:
        params = request.sampling if isinstance(request.sampling, SamplingParams) else SamplingParams()
        # As upstream, the prompt enters the penalty windows before the first token is drawn.
        return TokenSampler(params, self.vocab, prompt_tokens=request.prompt_tokens, context_size=self.context_size)

    def greedy_bias(self, sampler: TokenSampler) -> dict[int, float] | None:
        """The logit bias of a sampler that is an argmax of the biased logits and nothing else (no penalty or DRY
        edit, no probabilities to report), else None. Such rows are decoded ahead like plain greedy ones."""
        p = sampler.params
        if not sampler.is_greedy or p.n_probs > 0 or sampler.penalties.active or sampler.dry.enabled:
            return None
        return dict(sampler.bias)

    def sample(self, logits: mx.array, samplers: list[TokenSampler]) -> list[SampledToken]:
        return sample_batch(logits, samplers)


def probability_report(
    sampled: SampledToken, post_sampling: bool, piece: Any
) -> tuple[tuple[TokenProb, ...], TokenProb | None]:
    """The ``n_probs`` candidates and the chosen token as TokenProbs (log-probabilities unless post-sampling)."""

    def value(p: float | None) -> float:
        if p is None:
            return 0.0 if post_sampling else -math.inf
        if post_sampling:
            return p
        return math.log(p) if p > 0 else -math.inf

    def prob(token: int, p: float | None) -> TokenProb:
        text = piece(token)
        return TokenProb(token, text, value(p), tuple(text.encode("utf-8")))

    return tuple(prob(c.id, c.prob) for c in sampled.probs), prob(sampled.id, sampled.prob)

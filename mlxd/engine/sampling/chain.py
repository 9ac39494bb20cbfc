"""One request's sampler: llama.cpp's chain built from SamplingParams, with its state across steps.

The chain is b10621's ``common_sampler``: logit bias first, then the configured samplers in order and a final
seeded draw (adaptive-p's own when it is listed); or, with mirostat 1/2, logit bias, plain temperature and
mirostat in place of everything else. Penalty and DRY windows are fed every accepted token, starting with the
prompt.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import mlxd.engine.sampling.temperature as temp_stage  # the submodules themselves, not the package's surface
import mlxd.engine.sampling.truncation as truncation
from mlxd.engine.sampling.candidates import DEFAULT_SEED, Candidates, Mt19937, resolve_seed
from mlxd.engine.sampling.infill import Infill
from mlxd.engine.sampling.params import SamplingParams, SamplingVocab
from mlxd.engine.sampling.penalties import Dry, Penalties, apply_logit_bias, process_breakers


@dataclass(frozen=True)
class TokenCandidate:
    """One entry of a probability report: a token id and its probability."""

    id: int
    prob: float


@dataclass(frozen=True)
class SampledToken:
    """The sampled token and, when ``n_probs > 0``, the report llama-server builds for it.

    Without ``post_sampling_probs`` the report is the model's own distribution (softmax of the raw logits, before
    any sampler) and ``probs`` are its top ``n_probs``; with it, the distribution the chain left, sorted by
    probability, zero-probability entries left out. ``prob`` is the sampled token's probability in that same
    distribution (llama-server reports its log for ``logprob``).
    """

    id: int
    prob: float | None = None
    probs: tuple[TokenCandidate, ...] = ()


# Token texts and breaker tables depend only on the vocabulary (and the breaker strings), and cost a pass over
# the whole vocabulary: they are kept per vocabulary object.
_vocab_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cached(vocab: SamplingVocab) -> dict:
    try:
        return _vocab_cache.setdefault(vocab, {})
    except TypeError:  # a vocabulary that cannot be weakly referenced is simply not cached
        return {}


def _pieces_for(vocab: SamplingVocab) -> list[str]:
    cache = _cached(vocab)
    if "pieces" not in cache:
        cache["pieces"] = [vocab.decode([i]) for i in range(vocab.n_vocab)]
    return cache["pieces"]


def _breakers_for(vocab: SamplingVocab, breakers: tuple[str, ...]) -> dict[int, list[tuple[int, ...]]]:
    cache = _cached(vocab)
    key = ("breakers", breakers)
    if key not in cache:
        cache[key] = process_breakers(_pieces_for(vocab), vocab.encode, breakers)
    return cache[key]


class TokenSampler:
    """Per-request sampling state: ``sample(logits)`` picks a token, ``accept(token)`` records it.

    ``sample`` does not record the token: call ``accept`` with whatever token is finally emitted, as llama-server
    does. ``context_size`` stands in for ``-1`` windows (``--repeat-last-n -1``, ``--dry-penalty-last-n -1``).
    """

    def __init__(self, params: SamplingParams, vocab: SamplingVocab | None = None, *,
                 prompt_tokens: Sequence[int] = (), context_size: int = 4096) -> None:
        self.params = params
        self.seed = resolve_seed(params.seed)
        self.bias = dict(params.logit_bias)
        if params.ignore_eos:
            if vocab is None:
                raise ValueError("ignore_eos needs the vocabulary's end-of-generation ids")
            for token in vocab.eog_ids:
                self.bias[int(token)] = -np.inf
        mirostat = params.mirostat
        use = set(params.samplers) if mirostat == 0 else set()
        last_n = context_size if params.repeat_last_n == -1 else params.repeat_last_n
        self.penalties = Penalties(last_n if "penalties" in use else 0, params.repeat_penalty,
                                   params.frequency_penalty, params.presence_penalty)
        dry_on = "dry" in use and params.dry_multiplier != 0.0 and params.dry_base >= 1.0 \
            and params.dry_penalty_last_n != 0
        if dry_on and vocab is None:
            raise ValueError("DRY needs the vocabulary to resolve its sequence breakers")
        breakers = _breakers_for(vocab, params.dry_sequence_breakers) if dry_on and vocab is not None else {}
        self.dry = Dry(params.dry_multiplier if dry_on else 0.0, params.dry_base, params.dry_allowed_length,
                       params.dry_penalty_last_n, breakers, context_size)
        self.rng = Mt19937(self.seed)
        self.xtc_rng = self._own_rng()
        # adaptive-p, when listed, replaces the final draw (wherever it is listed), as upstream.
        self.adaptive: temp_stage.AdaptiveP | None = None
        if "adaptive_p" in use:
            self.adaptive = temp_stage.AdaptiveP(params.adaptive_target, params.adaptive_decay, self._own_rng())
        self.infill: Infill | None = None
        if "infill" in use:
            if vocab is None:
                raise ValueError("the infill sampler needs the vocabulary's token texts")
            self.infill = Infill(_pieces_for(vocab), list(vocab.eog_ids))
        self.mirostat: temp_stage.Mirostat | temp_stage.MirostatV2 | None = None
        if mirostat == 1:
            self.mirostat = temp_stage.Mirostat(0, params.mirostat_tau, params.mirostat_eta, self.rng)
        elif mirostat == 2:
            self.mirostat = temp_stage.MirostatV2(params.mirostat_tau, params.mirostat_eta, self.rng)
        # Only the tail of a long prompt can reach the windows; replaying the rest would change nothing.
        window = max(self.penalties.last_n, (self.dry.window.maxlen or 0) if self.dry.enabled else 0)
        for token in list(prompt_tokens)[-window:] if window else ():
            self.accept(token)

    def _own_rng(self) -> Mt19937:
        """A generator for one more stochastic stage: each upstream sampler owns one, seeded alike from a fixed
        seed, or each from its own random seed."""
        return Mt19937(resolve_seed(DEFAULT_SEED) if self.params.seed == DEFAULT_SEED else self.seed)

    @property
    def is_greedy(self) -> bool:
        """Whether the chain reduces to argmax of the logits after ``greedy_edits`` (whatever the draw)."""
        p = self.params
        if p.mirostat != 0 or "temperature" not in p.samplers or self.adaptive is not None:
            return False
        if not temp_stage.is_greedy_temperature(p.temperature, p.dynatemp_range):
            return False
        before = p.samplers[: p.samplers.index("temperature")]
        # Stages that may drop the top token before the temperature stage picks the maximum.
        if "infill" in before:
            return False
        if "typ_p" in before and p.typical_p < 1.0:
            return False
        if "xtc" in before and p.xtc_probability > 0.0 and p.xtc_threshold <= 0.5:
            return False
        # A penalty after a cut could lift a token the cut already dropped above the survivors.
        edits = self._active_edits()
        listed = [name for name in before if name in edits]
        if len(listed) != len(set(listed)):
            return False  # a stage listed twice: left to the exact chain
        seen_cut = False
        for name in before:
            if name in edits and seen_cut:
                return False
            seen_cut = seen_cut or name in ("top_k", "top_p", "min_p", "top_n_sigma")
        return True

    def greedy_edits(self) -> tuple[str, ...]:
        """For a greedy chain: the logit-editing stages ("penalties", "dry") that run before the argmax, in order.

        Logit bias always comes first and is not listed.
        """
        p = self.params
        before = p.samplers[: p.samplers.index("temperature")] if "temperature" in p.samplers else p.samplers
        edits = self._active_edits()
        return tuple(name for name in before if name in edits)

    def _active_edits(self) -> set[str]:
        return {name for name, on in (("penalties", self.penalties.active), ("dry", self.dry.enabled)) if on}

    def accept(self, token_id: int) -> None:
        """Record an emitted (or prompt) token in the penalty and DRY windows."""
        self.penalties.accept(token_id)
        self.dry.accept(token_id)
        if self.adaptive is not None:
            self.adaptive.accept(token_id)

    def sample(self, logits: np.ndarray) -> SampledToken:
        """Run the chain over one row of logits (float32 [V]) and pick a token; does not ``accept`` it."""
        cur = Candidates.from_logits(logits)
        if self.mirostat is not None and isinstance(self.mirostat, temp_stage.Mirostat):
            self.mirostat.n_vocab = cur.size
        self.apply(cur)
        token = int(cur.ids[cur.selected])
        return self._report(token, logits, cur)

    def apply(self, cur: Candidates) -> None:
        """The whole chain over ``cur``, leaving ``cur.selected`` set."""
        p = self.params
        apply_logit_bias(cur, self.bias)
        if self.mirostat is not None:
            temp_stage.scale(cur, p.temperature)
            self.mirostat.apply(cur)
            return
        for name in p.samplers:
            self._stage(name, cur)
        if self.adaptive is not None:
            self.adaptive.apply(cur)
        else:
            temp_stage.dist(cur, self.rng)

    def _stage(self, name: str, cur: Candidates) -> None:
        p = self.params
        if name == "penalties":
            self.penalties.apply(cur)
        elif name == "dry":
            self.dry.apply(cur)
        elif name == "top_n_sigma":
            truncation.top_n_sigma(cur, p.top_n_sigma)
        elif name == "top_k":
            truncation.top_k(cur, p.top_k)
        elif name == "typ_p":
            truncation.typical(cur, p.typical_p, p.min_keep)
        elif name == "top_p":
            truncation.top_p(cur, p.top_p, p.min_keep)
        elif name == "min_p":
            truncation.min_p(cur, p.min_p, p.min_keep)
        elif name == "xtc":
            truncation.xtc(cur, p.xtc_probability, p.xtc_threshold, p.min_keep, self.xtc_rng)
        elif name == "temperature":
            temp_stage.temperature_ext(cur, p.temperature, p.dynatemp_range, p.dynatemp_exponent)
        elif name == "infill" and self.infill is not None:
            self.infill.apply(cur)

    def _report(self, token: int, logits: np.ndarray, cur: Candidates | None) -> SampledToken:
        n = self.params.n_probs
        if n <= 0:
            return SampledToken(id=token)
        if self.params.post_sampling_probs and cur is not None:
            order = np.argsort(-cur.p, kind="stable")
            ids, probs = cur.ids[order], cur.p[order]
            hit = np.nonzero(ids == token)[0]
            prob = float(probs[hit[0]]) if hit.size else None
            top = [TokenCandidate(int(i), float(q)) for i, q in zip(ids[:n], probs[:n], strict=True)]
            # Stop at the first zero probability, as llama-server does.
            cut = next((k for k, c in enumerate(top) if c.prob == 0.0), len(top))
            return SampledToken(id=token, prob=prob, probs=tuple(top[:cut]))
        return raw_report(token, logits, n)


def raw_report(token: int, logits: np.ndarray, n: int) -> SampledToken:
    """The pre-sampling report: softmax of the raw logits, top ``n`` by logit, and the token's probability."""
    row = np.asarray(logits, dtype=np.float32).reshape(-1)
    e = np.exp(row - row.max(), dtype=np.float32)
    probs = e / e.sum(dtype=np.float32)
    n = min(n, row.shape[0])
    top = np.argpartition(-row, n - 1)[:n] if n < row.shape[0] else np.arange(row.shape[0])
    top = top[np.lexsort((top, -row[top]))]
    return SampledToken(
        id=token,
        prob=float(probs[token]),
        probs=tuple(TokenCandidate(int(i), float(probs[i])) for i in top),
    )

"""Rejection sampling for speculative decoding: a row that samples keeps its request's own distribution.

The request's chain (bias, penalties, DRY, top-k/p, min-p, temperature ...) turns a position's logits into a
distribution ``p``; applied to the draft's logits it gives the proposal distribution ``q`` the draft token was
drawn from. A proposal ``d`` is kept with probability ``min(1, p(d) / q(d))``; the first one refused is replaced by
a draw from ``max(0, p - q)`` renormalised, and when every proposal is kept one more token is drawn from the next
position's ``p``. Each emitted token is then distributed exactly as the chain would have drawn it without a draft
(Leviathan et al., 2023; Chen et al., 2023). The chain's windows (penalties, DRY) advance with each kept token on a
forked copy, so position ``j``'s ``p`` sees the tokens before it.

Only chains whose stages are functions of the logits and the token history qualify: mirostat, adaptive-p, XTC and
infill draw or branch on their own generators, and a row with those (or with ``n_probs`` reports, a constraint or
a reasoning budget) makes the step a plain decode step.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from mlxd.engine.sampling.candidates import Candidates, softmax
from mlxd.engine.sampling.penalties import apply_logit_bias


def eligible(seq: Any) -> bool:
    """Whether a sampling row can be verified by rejection sampling."""
    sampler = getattr(seq, "sampler", None)
    p = getattr(sampler, "params", None)
    if sampler is None or p is None or seq.matcher is not None or seq.budget is not None or p.n_probs > 0 or p.mirostat != 0:
        return False
    if sampler.adaptive is not None or "infill" in p.samplers:
        return False
    return not ("xtc" in p.samplers and p.xtc_probability > 0.0)


def fork(sampler: Any) -> Any:
    """A copy of ``sampler`` whose token windows can advance without touching the request's own."""
    out = copy.copy(sampler)
    out.penalties = copy.deepcopy(sampler.penalties)
    out.dry = copy.deepcopy(sampler.dry)
    return out


def distribution(sampler: Any, logits: np.ndarray) -> np.ndarray:
    """The chain's final distribution over the vocabulary for one row of logits (float64 [V], sums to 1)."""
    cur = Candidates.from_logits(np.asarray(logits, dtype=np.float32))
    apply_logit_bias(cur, sampler.bias)
    for name in sampler.params.samplers:
        sampler._stage(name, cur)
    dense = np.zeros(logits.shape[-1], dtype=np.float64)
    if cur.size:
        softmax(cur, do_sort=False)
        dense[cur.ids] = cur.p
    total = dense.sum()
    return dense / total if total > 0 else dense


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    return int(rng.choice(p.shape[0], p=p)) if p.sum() > 0 else int(np.argmax(p))


def propose(sampler: Any, logits: np.ndarray, rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """A draft token drawn from the chain over the draft's logits, and that distribution; the fork advances."""
    q = distribution(sampler, logits)
    token = draw(q, rng)
    sampler.accept(token)
    return token, q


def verify(sampler: Any, target: np.ndarray, drafts: list[int], qs: list[np.ndarray], offered: int,
           rng: np.random.Generator) -> tuple[list[int], int]:
    """(the tokens to emit, how many proposals were kept) for one row: ``target`` [k + 1, V] logits, ``drafts``
    and ``qs`` the proposals and their distributions, of which the first ``offered`` count."""
    fork_ = fork(sampler)
    out: list[int] = []
    for j in range(offered):
        p = distribution(fork_, target[j])
        d, q = drafts[j], qs[j]
        if q[d] > 0 and rng.random() < min(1.0, p[d] / q[d]):
            out.append(d)
            fork_.accept(d)
            continue
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        out.append(draw(residual / total if total > 0 else p, rng))
        return out, j
    out.append(draw(distribution(fork_, target[offered]), rng))
    return out, offered


def verify_fixed(sampler: Any, target: np.ndarray, drafts: list[int], rng: np.random.Generator
                 ) -> tuple[list[int], int]:
    """``verify`` for proposals that were not drawn (an n-gram lookup's: ``q`` is 1 on the proposal): each is kept
    with probability ``p(d)``, the first one refused is replaced by a draw from ``p`` without ``d``."""
    fork_ = fork(sampler)
    out: list[int] = []
    for j, d in enumerate(drafts):
        p = distribution(fork_, target[j])
        if rng.random() < p[d]:
            out.append(d)
            fork_.accept(d)
            continue
        p[d] = 0.0
        total = p.sum()
        out.append(draw(p / total if total > 0 else distribution(fork_, target[j]), rng))
        return out, j
    out.append(draw(distribution(fork_, target[len(drafts)]), rng))
    return out, len(drafts)

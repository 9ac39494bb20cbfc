"""Stages that drop candidates: top-k, top-p, min-p, locally typical, top-n-sigma and XTC.

Each follows llama.cpp b10621's ``llama_sampler_*_apply`` semantics, including the ``min_keep`` rules and which
stages leave the candidates sorted.
"""

from __future__ import annotations

import math

import numpy as np

from mlxd.engine.sampling.candidates import Candidates, Mt19937, softmax, sort_descending


def top_k(cur: Candidates, k: int) -> None:
    """Keep the ``k`` highest logits (``k <= 0`` keeps all); leaves the candidates sorted."""
    if k <= 0:
        return
    k = min(k, cur.size)
    if not cur.sorted:
        if k < cur.size:
            # Partial selection first: a full sort of a 150k vocabulary is the slow part of a step.
            n = cur.size
            part = np.argpartition(cur.logits, n - k)[n - k:]
            part.sort()  # id order among the chosen, so the stable sort below breaks ties by position
            order = part[np.argsort(-cur.logits[part], kind="stable")]
            cur.take(order)
        else:
            cur.take(np.argsort(-cur.logits, kind="stable"))
        cur.sorted = True
    cur.truncate(k)


def top_p(cur: Candidates, p: float, min_keep: int) -> None:
    """Nucleus: the smallest head whose probability mass reaches ``p`` (and at least ``min_keep``)."""
    if p >= 1.0:
        return
    softmax(cur, do_sort=False)
    sort_descending(cur)
    cum = np.cumsum(cur.p, dtype=np.float32)
    reach = np.nonzero((cum >= np.float32(p)) & (np.arange(1, cur.size + 1) >= min_keep))[0]
    cur.truncate(int(reach[0]) + 1 if reach.size else cur.size)


def min_p(cur: Candidates, p: float, min_keep: int) -> None:
    """Keep tokens whose probability is at least ``p`` times the top token's (compared as logits)."""
    if p <= 0.0 or cur.size == 0:
        return
    log_p = np.float32(math.log(p))
    if not cur.sorted:
        min_logit = cur.logits.max() + log_p
        keep = np.nonzero(cur.logits >= min_logit)[0]
        if keep.size > 0 and keep.size >= min_keep:
            if keep.size < cur.size:
                cur.take(keep)
            return
        sort_descending(cur)
    min_logit = cur.logits[0] + log_p
    # The first token always stays; stop at the first one below the bound once min_keep is met.
    below = np.nonzero((cur.logits[1:] < min_logit) & (np.arange(1, cur.size) >= min_keep))[0]
    cur.truncate(int(below[0]) + 1 if below.size else cur.size)


def typical(cur: Candidates, p: float, min_keep: int) -> None:
    """Locally typical sampling: keep tokens whose surprisal is closest to the entropy, up to mass ``p``.

    Zero-probability candidates (banned tokens) contribute nothing to the entropy, where upstream would let
    ``0 * log 0`` turn it into NaN.
    """
    if p >= 1.0:
        return
    softmax(cur, do_sort=True)
    probs = cur.p
    with np.errstate(divide="ignore", invalid="ignore"):
        log_probs = np.log(probs, dtype=np.float32)
        entropy = np.float32(-np.sum(np.where(probs > 0, probs * log_probs, 0.0), dtype=np.float32))
        shifted = np.abs(-log_probs - entropy)
    order = np.argsort(shifted, kind="stable")
    cum = np.cumsum(probs[order], dtype=np.float32)
    i = np.arange(cur.size)
    ok = (cum > np.float32(p)) & ((min_keep == 0) | (i >= min_keep - 1))
    hit = np.nonzero(ok)[0]
    last = int(hit[0]) + 1 if hit.size else cur.size
    cur.take(order[:last])
    cur.sorted = False


def top_n_sigma(cur: Candidates, n: float) -> None:
    """Mask logits more than ``n`` standard deviations below the maximum; leaves probabilities computed."""
    if n <= 0.0 or cur.size <= 1:
        return
    finite = cur.logits[cur.logits != -np.inf]
    if finite.size:
        top = max(np.float32(cur.logits[0]), finite.max())
        mean = np.float32(finite.sum(dtype=np.float32) / np.float32(finite.size))
        std = np.float32(math.sqrt(float(np.sum((finite - mean).astype(np.float64) ** 2)) / finite.size))
    else:
        top, std = cur.logits[0], np.float32(0.0)
    cur.logits = np.where(cur.logits < top - np.float32(n) * std, np.float32(-np.inf), cur.logits).astype(np.float32)
    softmax(cur, do_sort=True)


def xtc(cur: Candidates, probability: float, threshold: float, min_keep: int, rng: Mt19937) -> None:
    """Exclude Top Choices: with chance ``probability``, drop every token above ``threshold`` but the last."""
    if probability <= 0.0 or threshold > 0.5 or cur.size < 2:
        return
    if rng.uniform_float() > probability:
        return
    softmax(cur, do_sort=True)
    above = np.nonzero(cur.p < np.float32(threshold))[0]
    run = int(above[0]) if above.size else cur.size  # how many leading tokens reach the threshold
    pos_last = max(run - 1, 0)
    if cur.size - pos_last >= min_keep and pos_last > 0:
        cur.take(slice(pos_last, None))
        cur.sorted = True

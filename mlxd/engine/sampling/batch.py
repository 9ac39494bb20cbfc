"""Sampling a whole decode step: one call for every row of the batch, whatever each request asked for.

Greedy rows (the chain reduces to argmax) stay in MLX: their logit bias, repetition penalties and DRY edits
are scattered into the batch and one ``argmax`` picks all their tokens. Every other row is copied out alone and
runs its request's chain on numpy. Both share a single ``mx.eval``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import mlx.core as mx
import numpy as np

from mlxd.engine.batching import readback
from mlxd.engine.sampling.chain import SampledToken, TokenSampler


def sample_batch(logits: mx.array, samplers: Sequence[TokenSampler]) -> list[SampledToken]:
    """Sample one token per row of ``logits`` [B, V] with ``samplers[i]`` for row i; does not ``accept`` them."""
    if logits.ndim != 2 or logits.shape[0] != len(samplers):
        raise ValueError(f"logits of shape {tuple(logits.shape)} for {len(samplers)} samplers")
    fast = [i for i, s in enumerate(samplers) if s.is_greedy and s.params.n_probs <= 0]
    slow = [i for i in range(len(samplers)) if i not in set(fast)]

    pending: list[mx.array] = []
    greedy_tokens = None
    if fast:
        rows = logits if len(fast) == len(samplers) else logits[mx.array(fast)]
        greedy_tokens = mx.argmax(_edited(rows.astype(mx.float32), [samplers[i] for i in fast]), axis=-1)
        pending.append(greedy_tokens)
    slow_rows = None
    if slow:
        slow_rows = (logits if len(slow) == len(samplers) else logits[mx.array(slow)]).astype(mx.float32)
        pending.append(slow_rows)
    mx.eval(*pending)

    out: list[SampledToken | None] = [None] * len(samplers)
    if greedy_tokens is not None:
        for i, token in zip(fast, readback.ints(greedy_tokens), strict=True):
            out[i] = SampledToken(id=int(token))
    if slow_rows is not None:
        host = np.array(slow_rows, copy=False)
        for r, i in enumerate(slow):
            out[i] = samplers[i].sample(host[r])
    return cast(list[SampledToken], out)  # fast and slow together are every row: none is left None


def _edited(rows: mx.array, samplers: Sequence[TokenSampler]) -> mx.array:
    """The logits greedy rows see at the temperature stage: biased, then penalised and DRY-edited in chain order."""
    bias_r, bias_c, bias_v = [], [], []
    for r, s in enumerate(samplers):
        for token, value in s.bias.items():
            if 0 <= token < rows.shape[1]:
                bias_r.append(r)
                bias_c.append(token)
                bias_v.append(value)
    if bias_r:
        rows = rows.at[mx.array(bias_r), mx.array(bias_c)].add(mx.array(bias_v, dtype=mx.float32))

    # Each row's own order of penalties and DRY, in at most three passes; a stage placed after the
    # temperature stage cannot change a greedy pick and is skipped (greedy_edits leaves it out).
    edits = [s.greedy_edits() for s in samplers]
    dry_first = {r for r, e in enumerate(edits) if e[:1] == ("dry",)}
    rows = _penalise(rows, samplers, [r for r, e in enumerate(edits) if "penalties" in e and r not in dry_first])
    rows = _dry(rows, samplers, [r for r, e in enumerate(edits) if "dry" in e])
    return _penalise(rows, samplers, [r for r, e in enumerate(edits) if "penalties" in e and r in dry_first])


def _penalise(rows: mx.array, samplers: Sequence[TokenSampler], which: list[int]) -> mx.array:
    r_idx, c_idx, counts, rep, freq, pres = [], [], [], [], [], []
    for r in which:
        s = samplers[r]
        ids, cnt = s.penalties.edits()
        keep = (ids >= 0) & (ids < rows.shape[1])
        ids, cnt = ids[keep], cnt[keep]
        r_idx.append(np.full(ids.shape, r))
        c_idx.append(ids)
        counts.append(cnt)
        rep.append(np.full(ids.shape, s.penalties.repeat, np.float32))
        freq.append(np.full(ids.shape, s.penalties.frequency, np.float32))
        pres.append(np.full(ids.shape, s.penalties.presence, np.float32))
    if not r_idx or not sum(a.size for a in r_idx):
        return rows
    ri = mx.array(np.concatenate(r_idx))
    ci = mx.array(np.concatenate(c_idx))
    x = rows[ri, ci]
    rep_a = mx.array(np.concatenate(rep))
    scaled = mx.where(x <= 0, x * rep_a, x / rep_a)
    new = scaled - (mx.array(np.concatenate(counts)) * mx.array(np.concatenate(freq)) + mx.array(np.concatenate(pres)))
    rows[ri, ci] = new
    return rows


def _dry(rows: mx.array, samplers: Sequence[TokenSampler], which: list[int]) -> mx.array:
    r_idx, c_idx, vals = [], [], []
    for r in which:
        for token, penalty in samplers[r].dry.edits().items():
            if 0 <= token < rows.shape[1]:
                r_idx.append(r)
                c_idx.append(token)
                vals.append(penalty)
    if not r_idx:
        return rows
    return rows.at[mx.array(r_idx), mx.array(c_idx)].subtract(mx.array(vals, dtype=mx.float32))

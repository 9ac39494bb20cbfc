"""Speculative decoding inside continuous batching (``--spec-type draft-simple``, ``-md``): a draft model proposes
up to ``k`` tokens for every row of the decode batch, and the target verifies all rows' proposals in one forward
pass of ``k + 1`` tokens per row.

mlx-lm's ``speculative_generate_step`` does this for one sequence, which is why ``mlx_lm.server`` turns batching
off for a draft model. Here each row keeps its own acceptance: the target's cache keeps, per row, the pending token
and the proposals it accepted, and drops the rest. When every row drops the same number of entries that is a plain
``trim``; otherwise the batch cache's right-padding roll (``finalize``, as prompt processing uses it) moves each
row's dropped entries into its left padding, where the attention mask hides them.

A greedy row keeps the leading proposals that equal the target's argmax, so its tokens are exactly those of
decoding without a draft. A row that samples draws its proposals from its own chain over the draft's logits and
keeps them by rejection sampling against the chain over the target's (``speculative_sampling``), so its tokens
keep the request's distribution. A row whose chain draws on its own generators (mirostat, XTC, adaptive-p), asks
for ``n_probs``, or has a constraint or a reasoning budget makes the step a plain decode step. The draft's cache
then falls behind; the tokens it lacks (``Sequence.all_tokens[draft_len:n_past]``) are fed to it, right-padded per
row, before it drafts again (the one token a fully accepted step leaves goes through its compiled pass). The draft
length ``k`` adapts to the batch's acceptance, down to 0 (no drafting, a probe every ``PROBE_EVERY`` steps), so a
draft that never agrees costs little.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import mlx.core as mx
import numpy as np

from mlxd.engine.loading import kv_types
from mlxd.engine.batching import readback
from mlxd.engine.speculative import rejection as rs
from mlxd.engine.batching.batch import DecodeBatch
from mlxd.engine.batching.compiled import CompiledStep
from mlxd.engine.speculative.ngram_draft import Lookups
from mlxd.engine.batching.sequence import Sequence
from mlxd.engine.batching.slots.table import Slot

log = logging.getLogger("mlxd.engine.speculative.draft_model")

PROBE_EVERY = 32  # plain steps between one-token probes while k is 0


@dataclass
class SpecConfig:
    """What ``--spec-draft-*`` sets."""

    n_max: int = 3
    n_min: int = 0
    p_min: float = 0.0


@dataclass
class SpecStats:
    """Totals for /props, /slots and /metrics (b10621's spec_decode_* counters)."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0


@dataclass
class DraftRows:
    """The draft model's batched cache, one row per decode-batch row (reconciled at the start of each step)."""

    # Each row's sequence: a slot that has finished one request and started the next between two speculative
    # steps is the same slot with another sequence, whose draft row starts empty.
    seqs: list[Sequence] = field(default_factory=list)
    cache: list[Any] | None = None
    lens: list[int] = field(default_factory=list)  # tokens in each row's draft cache

    def clear(self) -> None:
        self.seqs, self.cache, self.lens = [], None, []


class Speculating:
    """The speculative decode step; a mixin of ``Scheduler``."""

    # Provided by the Scheduler this is mixed into.
    model: Callable[..., mx.array]
    batch: DecodeBatch
    draft: Any  # the draft nn.Module, or None
    ngram: Lookups | None  # the draft-free --spec-types (engine.speculative.ngram_draft)
    draft_kv: kv_types.KvType
    spec: SpecConfig
    spec_stats: SpecStats
    _draft_rows: DraftRows
    _spec_k: int
    _spec_idle: int
    _steps: int
    _accept: Callable[..., bool]
    _retire: Callable[[list[int]], None]
    _settle: Callable[[], None]
    _bias_for: Callable[[list[Any], int], mx.array | None]
    compiled: CompiledStep | None
    compiled_draft: CompiledStep | None
    _ngram_step: Callable[[list[int]], bool]  # engine.speculative.ngram_step's step, mixed into the Scheduler beside this
    _pass: Callable[..., mx.array]  # a forward pass, compiled where it applies (engine.batching.decode)

    def _speculate(self) -> bool:
        """Run one speculative step for the whole batch; False when this step should decode plainly."""
        batch = self.batch
        seqs = [s.seq for s in batch.slots]
        if not all(q is not None and (q.plain_greedy or rs.eligible(q)) for q in seqs):
            return False
        sampled = [i for i, q in enumerate(seqs) if q is not None and not q.plain_greedy]
        # As b10621, the n-gram lookup goes first; a row it finds nothing for may still use the draft model.
        if self.ngram is not None and self._ngram_step(sampled):
            return True
        if self.draft is None or self.spec.n_max == 0:
            return False
        if self._spec_k == 0:
            self._spec_idle += 1
            if self._spec_idle < PROBE_EVERY:
                return False
            self._spec_idle = 0
        k = max(1, self._spec_k)
        if any(batch.awaiting):
            self._settle()
            if not len(batch):
                return True
        # As b10621, a row proposes no more than its room: the context less two, one fewer than it still generates.
        rooms = [max(0, room(s)) for s in batch.slots]
        k = min(k, max(rooms))
        if k == 0:
            return False
        self._sync_draft_rows()
        self._steps += 1
        pending = batch.tokens
        assert pending is not None and self._draft_rows.cache is not None and batch.cache is not None
        drafts, probs, qs = self._draft(pending, k, sampled)
        # The verification pass is compiled per shape: its proposals padded to a power of two (or to n_max, where k
        # usually is) keep the traces few (the padding is offered by no row, and fits where the roomiest row has
        # room).
        k_pass = k if k == self.spec.n_max else min(1 << (k - 1).bit_length(), self.spec.n_max, max(rooms))
        padded = drafts if k_pass == k else mx.concatenate(
            [drafts, mx.zeros((drafts.shape[0], k_pass - k), dtype=drafts.dtype)], axis=1)
        targets, rows = self._verify(pending, padded, sampled)
        outs: list[Any] = [drafts, targets] + ([probs] if probs is not None else []) + ([rows] if sampled else [])
        mx.eval(outs)
        d_host, t_host = readback.int_rows(drafts), readback.int_rows(targets)
        p_host = readback.float_rows(probs) if probs is not None else None
        offered = [min(k, r) for r in rooms]
        chosen: dict[int, tuple[list[int], int]] = {}  # sampling rows: (tokens to emit, proposals kept)
        if rows is not None:
            host = np.array(rows, copy=False)
            for r, i in enumerate(sampled):
                seq = batch.slots[i].seq
                assert seq is not None
                chosen[i] = rs.verify(seq.sampler, host[r], d_host[i], qs[i], offered[i], draws(seq))
        if p_host is not None:  # --spec-draft-p-min: a greedy row stops proposing at its first unsure token
            for i in range(len(batch)):
                if i not in chosen:
                    offered[i] = next((j for j in range(offered[i]) if p_host[i][j] < self.spec.p_min), offered[i])
        keep, done, accepted = self._emit(k_pass, offered, chosen, d_host, t_host)
        draft_rows = self._draft_rows
        kept_d = [min(u, k - 1) for u in keep]
        _roll_back(draft_rows.cache, [(k - 1) - u for u in kept_d], False)
        draft_rows.lens = [n + 1 + u for n, u in zip(draft_rows.lens, kept_d)]
        self._adapt(accepted, sum(offered))
        if done:
            self._retire(done)
        return True

    def _verify(self, pending: mx.array, drafts: mx.array, sampled: list[int]) -> tuple[mx.array, mx.array | None]:
        """The target's pass over each row's pending token and its proposals [B, k + 1]: its argmax per position
        (with the rows' bias), and the sampling rows' float32 logits (None when no row samples)."""
        verify = mx.concatenate([pending[:, None].astype(mx.uint32), drafts], axis=1)
        assert self.batch.cache is not None
        logits = self._pass(self.compiled, self.model, verify, self.batch.cache)
        rows = logits[mx.array(sampled)].astype(mx.float32) if sampled else None
        bias = self._bias_for([s.seq for s in self.batch.slots], logits.shape[-1])
        if bias is not None:
            logits = logits.astype(mx.float32) + bias[:, None, :]
        return mx.argmax(logits, axis=-1), rows

    def _emit(self, k: int, offered: list[int], chosen: dict[int, tuple[list[int], int]], d_host: list[list[int]],
              t_host: list[list[int]]) -> tuple[list[int], list[int], int]:
        """Emit each row's verified tokens and drop what the target's cache holds beyond them: a greedy row keeps
        its leading proposals (of the first ``offered``) that equal the target's argmax, a sampling row what
        ``chosen`` says. (proposals kept per row, rows that finished, proposals accepted)."""
        batch = self.batch
        done: list[int] = []
        keep: list[int] = []  # proposals each row keeps in the target's cache
        last: list[int] = []  # each row's next input: the last token it emitted
        accepted = 0
        for i, slot in enumerate(batch.slots):
            seq = live(slot)
            if i in chosen:
                tokens, agreed = chosen[i]
            else:
                agreed = 0
                while agreed < offered[i] and d_host[i][agreed] == t_host[i][agreed]:
                    agreed += 1
                tokens = t_host[i][: agreed + 1]
            used = agreed
            for j in range(agreed + 1):
                if not self._accept(slot, tokens[j]):
                    used = j
                    done.append(i)
                    break
            seq.n_past += used + 1
            seq.n_drafted += offered[i]
            seq.n_draft_steps += 1
            seq.n_draft_accepted += min(agreed, used)
            accepted += min(agreed, used)
            keep.append(used)
            last.append(tokens[used])
        _roll_back(batch.cache, [k - u for u in keep], batch.solo)
        batch.tokens = mx.array(last, dtype=mx.uint32)
        batch.awaiting = [False] * len(batch)
        self.spec_stats.drafted += sum(offered)
        self.spec_stats.accepted += accepted
        self.spec_stats.steps += 1
        return keep, done, accepted

    def _adapt(self, accepted: int, drafted: int) -> None:
        """Grow k by one while the batch accepts every proposal; halve it while it accepts fewer than half (a long
        ``--spec-draft-n-max`` with a draft that stops agreeing is down to nothing in a few steps)."""
        k = max(1, self._spec_k)
        if drafted == 0:  # every row's draft was below --spec-draft-p-min
            self._spec_k = max(k - 1, self.spec.n_min, 0)
            return
        if accepted == drafted:
            k = min(k + 1, self.spec.n_max)
        elif 2 * accepted < drafted:
            k //= 2
        self._spec_k = max(k, self.spec.n_min, 0)

    def _draft(self, pending: mx.array, k: int, sampled: list[int]
               ) -> tuple[mx.array, mx.array | None, dict[int, list[np.ndarray]]]:
        """``k`` proposals per row [B, k]: greedy rows' argmax, sampling rows' draws from their chain (with those
        draws' distributions); and the draft probabilities when --spec-draft-p-min is set. The tokens the draft's
        cache lacks go in first, right-padded per row."""
        rows, batch = self._draft_rows, self.batch
        assert rows.cache is not None
        lags = [live(s).all_tokens[n : live(s).n_past] for s, n in zip(batch.slots, rows.lens)]
        longest = max(len(lag) for lag in lags) + 1
        if longest <= 2 and all(len(lag) == longest - 1 for lag in lags):
            # Every row lags alike by at most the one token a step's last proposal leaves (all rows took every
            # proposal, which the draft never fed): no padding, so the lag and the pending token are one compiled
            # pass. Longer lags (catching up after plain steps) would each be a trace of their own.
            tokens = pending[:, None].astype(mx.uint32)
            if longest > 1:
                tokens = mx.concatenate([mx.array(lags, dtype=mx.uint32), tokens], axis=1)
            logits = self._pass(self.compiled_draft, self.draft, tokens, rows.cache, last=True)
            rows.lens = [n + longest - 1 for n in rows.lens]
        else:
            pads = [longest - 1 - len(lag) for lag in lags]
            pending_host = readback.ints(pending)
            tokens = mx.array([lag + [pending_host[i]] + [0] * pads[i] for i, lag in enumerate(lags)], dtype=mx.uint32)
            for c in rows.cache:
                c.prepare(right_padding=pads)
            full = self.draft(tokens, cache=rows.cache)
            for c in rows.cache:
                c.finalize()
            last = mx.array([longest - 1 - p for p in pads])
            logits = mx.take_along_axis(full, last[:, None, None], axis=1)[:, 0, :]
            rows.lens = [n + len(lag) for n, lag in zip(rows.lens, lags)]
        want_p = self.spec.p_min > 0
        out, probs = [], []
        forks = {i: rs.fork(live(batch.slots[i]).sampler) for i in sampled}
        qs: dict[int, list[np.ndarray]] = {i: [] for i in sampled}
        # Greedy rows propose what their own argmax would pick: the logits plus the row's bias, as _verify's.
        bias = self._bias_for([live(s) for s in batch.slots], logits.shape[-1])
        for j in range(k):
            token = mx.argmax(logits if bias is None else logits.astype(mx.float32) + bias, axis=-1)
            if sampled:  # their proposals come from the host: one read-back per draft step
                host = np.array(logits[mx.array(sampled)].astype(mx.float32))
                picks = readback.ints(token)
                for r, i in enumerate(sampled):
                    picks[i], q = rs.propose(forks[i], host[r], draws(batch.slots[i].seq))
                    qs[i].append(q)
                token = mx.array(picks)
            out.append(token)
            if want_p:
                probs.append(mx.softmax(logits.astype(mx.float32), axis=-1).max(axis=-1))
            if j + 1 < k:
                logits = self._pass(self.compiled_draft, self.draft, token.astype(mx.uint32), rows.cache,
                                    last=True)
        drafts = mx.stack(out, axis=1).astype(mx.uint32)
        return drafts, (mx.stack(probs, axis=1) if want_p else None), qs

    def _sync_draft_rows(self) -> None:
        """Make the draft's rows the decode batch's rows, in its order: gone rows dropped, new ones added empty."""
        rows = self._draft_rows
        seqs = [live(s) for s in self.batch.slots]
        if len(rows.seqs) == len(seqs) and all(a is b for a, b in zip(rows.seqs, seqs)):
            return
        kept = [i for i, q in enumerate(rows.seqs) if any(q is b for b in seqs)]
        if rows.cache is not None and len(kept) != len(rows.seqs):
            if kept:
                for c in rows.cache:
                    c.filter(kept)
                rows.seqs = [rows.seqs[i] for i in kept]
                rows.lens = [rows.lens[i] for i in kept]
            else:
                rows.clear()
        for seq in seqs:
            if any(seq is q for q in rows.seqs):
                continue
            fresh = [c.merge([c]) for c in kv_types.make_cache(self.draft, self.draft_kv)]
            if rows.cache is None:
                rows.cache = fresh
            else:
                for mine, theirs in zip(rows.cache, fresh):
                    mine.extend(theirs)
            rows.seqs.append(seq)
            rows.lens.append(0)
        order = [next(i for i, q in enumerate(rows.seqs) if q is seq) for seq in seqs]
        if order != list(range(len(order))):
            assert rows.cache is not None
            for c in rows.cache:
                c.filter(order)
            rows.seqs = [rows.seqs[i] for i in order]
            rows.lens = [rows.lens[i] for i in order]


def room(slot: Slot) -> int:
    """b10621's room for a row's proposals: its context less two, and one fewer than the tokens it still generates."""
    seq = live(slot)
    room = slot.n_ctx - seq.n_past - 2
    if seq.n_remain > 0:
        room = min(room, seq.n_remain - 1)
    return room


def live(slot: Slot) -> Sequence:
    """The sequence a decode-batch row runs (a row in the batch always holds one)."""
    assert slot.seq is not None
    return slot.seq


def draws(seq: Any) -> np.random.Generator:
    """The sequence's generator for proposals and acceptance draws, seeded from its request's seed."""
    if seq.spec_rng is None:
        seq.spec_rng = np.random.default_rng(seq.sampler.seed)
    return seq.spec_rng


def _roll_back(cache: list[Any] | None, drop: list[int], solo: bool) -> None:
    """Drop the last ``drop[i]`` entries of row i: a trim when all rows drop alike (or one row decodes on its own
    caches), else the right-padding roll that moves each row's dropped entries into its left padding."""
    if cache is None or not any(drop):
        return
    if solo or len(set(drop)) == 1:
        for c in cache:
            c.trim(drop[0])
        return
    pad = mx.array(drop)
    for c in cache:
        c._right_padding = pad
        c.finalize()


def check_draft(target_vocab: int, draft_vocab: int) -> str | None:
    """Why a draft cannot serve a target, or None."""
    if target_vocab != draft_vocab:
        return (f"the draft model's vocabulary ({draft_vocab} tokens) differs from the target's ({target_vocab} "
                "tokens); speculative decoding needs the same vocabulary")
    return None

"""The scheduler's decode step: one forward pass for every generating slot, greedy rows pipelined on the device,
other rows through the sampling chain, and ``--context-shift`` when a slot's context is full.

A mixin of ``Scheduler``, which owns the batch, the sampling backend and the slot lifecycle (``_accept``,
``_retire``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, cast

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from mlxd.engine.batching import context_shift
from mlxd.engine.batching import readback
from mlxd.engine.batching.batch import DecodeBatch
from mlxd.engine.batching.compiled import CompiledStep, as_rows
from mlxd.engine.constrain import apply_masks
from mlxd.engine.batching.counters import DecodeCounter
from mlxd.engine.batching.sequence import Sequence
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.slots.table import Slot

log = logging.getLogger("mlxd.engine.batching.scheduler")


class Decoding:
    """Advances every row of the decode batch by one token per step."""

    # Provided by the Scheduler this is mixed into.
    model: Callable[..., mx.array]
    batch: DecodeBatch
    prefilling: list[Slot]
    decodes: DecodeCounter
    settings: WorkerSettings
    sampling: Any
    bos_id: int | None
    _steps: int
    compiled: CompiledStep | None
    lora: Any
    _bias_rows: tuple[tuple[Sequence, ...], int, mx.array | None]
    _accept: Callable[..., bool]
    _retire: Callable[[list[int]], None]
    draft: Any
    ngram: Any
    _speculate: Callable[[], bool]

    def _decode(self) -> None:
        batch = self.batch
        if self.settings.context_shift:
            for slot in [s for s in batch.slots if s.seq is not None and s.seq.n_past + 1 >= s.n_ctx]:
                self._shift(slot)
        if (self.draft is not None or self.ngram is not None) and self._speculate():
            return
        pipelined = all(s.seq.plain_greedy for s in batch.slots if s.seq is not None)
        if not pipelined and any(batch.awaiting):
            self._settle()
            if not len(batch):
                return
        assert batch.tokens is not None
        self._steps += 1
        if self._steps % 512 == 0:
            mx.clear_cache()  # as mlx_lm's batch generator: keep the buffer cache from only growing
        logits = self._forward(batch)
        self.decodes.count(len(batch) + len(self.prefilling))
        done: list[int] = []
        if pipelined:
            # Start the next step's tokens now; read this step's inputs while the device works.
            following = self._argmax(logits, [s.seq for s in batch.slots if s.seq is not None]).astype(mx.uint32)
            mx.async_eval(following)
            inputs = readback.ints(batch.tokens) if any(batch.awaiting) else None
            for i, slot in enumerate(batch.slots):
                seq = slot.seq
                assert seq is not None
                if batch.awaiting[i] and inputs is not None and not self._accept(slot, inputs[i]):
                    done.append(i)
                seq.n_past += 1
            batch.tokens, batch.awaiting = following, [True] * len(batch)
        else:
            seqs = [s.seq for s in batch.slots if s.seq is not None]
            if any(q.matcher is not None for q in seqs):
                logits = apply_masks(logits, [q.matcher for q in seqs])
            results = self.sampling.sample(logits, [q.sampler for q in seqs])
            ids = [int(r.id) for r in results]
            force_tokens(seqs, ids, results)
            for i, slot in enumerate(batch.slots):
                assert slot.seq is not None
                slot.seq.n_past += 1
                if not self._accept(slot, ids[i], results[i]):
                    done.append(i)
            batch.tokens, batch.awaiting = mx.array(ids, dtype=mx.uint32), [False] * len(batch)
        if done:
            self._retire(done)

    def _forward(self, batch: DecodeBatch) -> mx.array:
        """The logits [B, V] of one token per row, the batch's caches moved on by one: compiled where it applies."""
        assert batch.tokens is not None
        return self._pass(self.compiled, self.model, batch.tokens, batch.cache or [], last=True)

    def _pass(self, step: CompiledStep | None, model: Callable[..., mx.array], tokens: mx.array, cache: list[Any],
              last: bool = False) -> mx.array:
        """``model`` on ``tokens`` [B, N] (or [B]: one each): every position's logits (``last``: the last one's),
        compiled where it applies (engine.batching.compiled; not with LoRA adapters, whose scales a trace would keep)."""
        out = step.forward(tokens, cache, last) if step is not None and not len(self.lora) else None
        if out is not None:
            return out
        logits = model(as_rows(tokens), cache=cache)
        return logits[:, -1, :] if last else logits

    def _argmax(self, logits: mx.array, seqs: list[Sequence]) -> mx.array:
        """Plain-greedy rows' tokens: the argmax of their logits plus their bias, as the sampling chain's greedy
        path computes it (in float32; adding 0 leaves an unbiased logit as it was)."""
        rows = self._bias_for(seqs, logits.shape[-1])
        if rows is None:
            return mx.argmax(logits, axis=-1)
        return mx.argmax(logits.astype(mx.float32) + rows, axis=-1)

    def _bias_for(self, seqs: list[Any], width: int) -> mx.array | None:
        """The rows' logit biases [B, V] (None when no row has one), rebuilt only when the rows change."""
        key = tuple(seqs)
        if self._bias_rows[1] != width or len(key) != len(self._bias_rows[0]) or any(
            a is not b for a, b in zip(key, self._bias_rows[0])
        ):
            rows = None
            if any(q.greedy_bias for q in seqs):
                host = np.zeros((len(seqs), width), np.float32)
                for r, q in enumerate(seqs):
                    for token, value in q.greedy_bias.items():
                        if 0 <= token < width:
                            host[r, token] += value
                rows = mx.array(host)
            self._bias_rows = (key, width, rows)
        return self._bias_rows[2]

    def _shift(self, slot: Slot) -> None:
        """Make room in a full slot (``--context-shift``): its row leaves the batch and comes back shifted."""
        seq, batch = slot.seq, self.batch
        assert seq is not None and batch.tokens is not None
        row = batch.row_of(slot)
        has_bos = self.bos_id is not None and bool(seq.prompt) and seq.prompt[0] == self.bos_id
        keep, discard = context_shift.plan(
            seq.n_past, slot.n_ctx, seq.request.n_keep, seq.request.n_discard, len(seq.prompt), has_bos
        )
        pending, awaiting = batch.tokens[row], batch.awaiting[row]
        # The Scheduler's model is an nn.Module; this mixin declares only its call signature.
        kv = context_shift.shift(cast(nn.Module, self.model), batch.extract(row), keep, discard)
        batch.remove([row])
        batch.add(slot, kv, pending, awaiting)
        seq.n_past -= discard
        seq.truncated = seq.shifted = True
        log.warning("slot %d context shift: n_keep = %d, n_discard = %d", slot.id, keep, discard)

    def _settle(self) -> None:
        """Read back and accept the tokens a pipelined step left pending."""
        batch = self.batch
        assert batch.tokens is not None
        inputs = readback.ints(batch.tokens)
        done = [
            i
            for i, slot in enumerate(batch.slots)
            if batch.awaiting[i] and not self._accept(slot, inputs[i])
        ]
        batch.awaiting = [False] * len(batch)
        if done:
            self._retire(done)


def force_tokens(seqs: list[Sequence], tokens: list[int], results: list[Any]) -> None:
    """Replace the drawn token of each row whose reasoning budget forces one now (it reports no probabilities)."""
    for i, seq in enumerate(seqs):
        forced = seq.forced_token()
        if forced is not None:
            tokens[i], results[i] = forced, None

"""Prompt processing for the scheduler: grouping waiting prompts, one padded forward pass for a group, chunked
prefill of a single prompt within ``--batch-size``, and the first token of each prompt that ends in a step.

As in b10621, ``--batch-size`` is the logical batch (the prompt tokens one step may process) and ``--ubatch-size``
the physical one: no forward pass of prompt processing carries more tokens, a group's padding included. The
physical batch is also what keeps a long prompt cheap on the CPU device: a pass's attention computes an exponential
for every query and key of the pass, the causally masked ones included, so passes of 512 tokens cut that work on a
1024-token prompt by a quarter and those of 256 by more than a third (docs/benchmarks.md, section 7). A short run
of prompt tokens (a new request's, or the new turn after a cached conversation) is the other way round: its pass
costs what its graph's operations cost, so it goes through the decode step's compiled pass (engine.batching.compiled).

A mixin of ``Scheduler``: it works on the scheduler's ``model``, ``prefilling`` list and slot release, and keeps the
token arithmetic of prompt processing apart from admission, sampling and decoding.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import mlx.core as mx

from mlxd.engine.batching import readback
from mlxd.engine.batching.compiled import CompiledStep
from mlxd.engine.constrain import apply_masks
from mlxd.engine.batching.counters import DecodeCounter
from mlxd.engine.batching.decode import force_tokens
from mlxd.engine.loading.kv_types import empty_batch, is_single
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.slots.table import Slot


log = logging.getLogger("mlxd.engine.batching.scheduler")


class PromptProcessing:
    """Turns prompt tokens into KV cache and, on a prompt's last token, its first generated token."""

    # Provided by the Scheduler this is mixed into.
    model: Callable[..., mx.array]
    prefilling: list[Slot]
    batch: Any  # the decode batch (its length: the slots generating)
    decodes: DecodeCounter
    _release: Callable[[Slot, list[Any] | None], None]
    _drop: Callable[[Slot, str], None]
    _accept: Callable[..., bool]
    _argmax: Callable[[mx.array, list[Any]], mx.array]
    _pass: Callable[..., mx.array]  # a forward pass, compiled where it applies (engine.batching.decode)
    compiled: CompiledStep | None
    sampling: Any
    settings: WorkerSettings
    lora: Any

    def _prefill(self, budget: int) -> None:
        """Prompt chunks in arrival order within ``budget`` tokens; prompts that end here draw their first token
        together (one evaluation, one sampling call)."""
        finished: list[tuple[Slot, mx.array]] = []
        group = self._prefill_group(budget)
        if len(group) > 1:
            try:
                budget -= self._prefill_together(group, finished)
            except Exception as exc:
                log.exception("prompt processing failed")
                finished.clear()
                for slot in group:
                    self._drop(slot, f"prompt processing failed: {exc}")
        for slot in list(self.prefilling):
            if budget <= 0:
                break
            try:
                used, logits = self._prefill_chunk(slot, budget)
            except Exception as exc:
                log.exception("prompt processing failed")
                self._drop(slot, f"prompt processing failed: {exc}")
                continue
            budget -= used
            if logits is not None:
                finished.append((slot, logits))
        if finished:
            try:
                self._first_tokens(finished)
            except Exception as exc:
                log.exception("first token failed")
                for slot, _ in finished:
                    self._drop(slot, f"generation failed: {exc}")

    def _first_tokens(self, finished: list[tuple[Slot, mx.array]]) -> None:
        """Draw the first token of each prompt just processed; rows that go on join the decode batch."""
        seqs = [slot.seq for slot, _ in finished if slot.seq is not None]
        logits = mx.concatenate([lg for _, lg in finished]) if len(finished) > 1 else finished[0][1]
        if any(q.matcher is not None for q in seqs):
            logits = apply_masks(logits, [q.matcher for q in seqs])
        results: list[Any]
        if all(q.plain_greedy for q in seqs):
            results = [None] * len(seqs)
            tokens = readback.ints(self._argmax(logits, seqs))
        else:
            results = self.sampling.sample(logits, [q.sampler for q in seqs])
            tokens = [int(r.id) for r in results]
            force_tokens(seqs, tokens, results)
        for (slot, _), token, sampled in zip(finished, tokens, results):
            seq, kv = slot.seq, slot.kv
            assert seq is not None and kv is not None
            seq.prompt_done()
            if self._accept(slot, int(token), sampled):
                self.batch.add(slot, kv, int(token))
                slot.kv = None
            elif slot.seq is not None:
                self._release(slot, kv)

    def _prefill_group(self, budget: int) -> list[Slot]:
        """Waiting prompts whose remaining tokens fit the budget and one physical batch together, padded to the
        longest; a prompt may have part of its tokens cached already (a prompt-cache hit), and its row then starts
        from that cache."""
        group: list[Slot] = []
        longest = 0
        budget = min(budget, self.settings.ubatch_size)
        for slot in self.prefilling:
            seq, kv = slot.seq, slot.kv
            if seq is None or kv is None or not all(is_single(c) for c in kv):
                continue
            n = len(seq.prompt) - seq.n_past
            if max(longest, n) * (len(group) + 1) > budget:
                break
            group.append(slot)
            longest = max(longest, n)
        return group

    def _prefill_together(self, group: list[Slot], finished: list[tuple[Slot, mx.array]]) -> int:
        """Whole prompts in one forward pass (as mlx_lm's batch generation does); returns the tokens computed.

        Prompts with nothing cached are left-padded to the longest. Rows that start from a cache are merged into
        one batch cache and their remaining tokens right-padded, then the padding is rolled to the left, as
        mlx_lm's ``PromptProcessingBatch`` does.
        """
        seqs = [slot.seq for slot in group if slot.seq is not None]
        rests = [q.prompt[q.n_past :] for q in seqs]
        lengths = [len(r) for r in rests]
        longest = max(lengths)
        pads = [longest - n for n in lengths]
        assert group[0].kv is not None
        if not any(q.n_past for q in seqs):
            tokens = mx.array([[0] * pad + r for pad, r in zip(pads, rests)])
            cache = [empty_batch(c, pads) for c in group[0].kv]
            if longest > 1:
                self.model(tokens[:, :-1], cache=cache)
            last = tokens[:, -1:]
        else:
            kvs = [slot.kv for slot in group]
            assert all(kv is not None for kv in kvs)  # each row of the group brings its own cache to the merge
            cache = [c.merge([kv[i] for kv in kvs if kv is not None]) for i, c in enumerate(group[0].kv)]
            if longest > 1:
                heads = mx.array([r[:-1] + [0] * pad for pad, r in zip(pads, rests)])
                if max(pads):
                    for c in cache:
                        c.prepare(lengths=[n - 1 for n in lengths], right_padding=pads)
                self.model(heads, cache=cache)
                for c in cache:
                    c.finalize()
            last = mx.array([[r[-1]] for r in rests])
        logits = self._pass(self.compiled, self.model, last, cache, last=True)  # the decode step's own trace
        self.decodes.count(len(self.batch) + len(self.prefilling))
        for i, (slot, seq) in enumerate(zip(group, seqs)):
            slot.kv = [c.extract(i) for c in cache]
            seq.n_past = len(seq.prompt)
            seq.n_prompt_processed += lengths[i]
            seq.progress()
            self.prefilling.remove(slot)
            if seq.n_predict == 0:
                mx.eval([c.state for c in slot.kv])
                seq.prompt_done()
                self._release(slot, slot.kv)
            else:
                finished.append((slot, logits[i : i + 1]))
        return longest * len(group)

    def _prefill_chunk(self, slot: Slot, budget: int) -> tuple[int, mx.array | None]:
        """Process up to ``budget`` prompt tokens; on the prompt's last chunk, return its final logits [1, V]."""
        seq, kv = slot.seq, slot.kv
        assert seq is not None and kv is not None
        start = seq.n_past
        todo = len(seq.prompt) - start
        n = min(todo, budget)
        self.decodes.count(len(self.batch) + len(self.prefilling))
        seq.n_past += n
        seq.n_prompt_processed += n
        if n < todo:
            self._fill(kv, seq.prompt[start : start + n])
            mx.eval([c.state for c in kv])
            seq.progress()
            return n, None
        # Last chunk: only the final position's logits are needed, so it goes through on its own, as a decode step
        # does (compiled: a one-row step's trace).
        if n > 1:
            self._fill(kv, seq.prompt[start:-1])
        logits = self._pass(self.compiled, self.model, mx.array(seq.prompt[-1:])[None], kv, last=True)
        seq.progress()
        return n, self._prompt_processed(slot, kv, logits)

    def _fill(self, kv: list[Any], tokens: list[int]) -> None:
        """Run ``tokens`` into one prompt's caches: a short run through the compiled pass (as a decode step, where
        its graph's operations cost more than their arithmetic), else in forward passes of at most
        ``--ubatch-size`` tokens, each evaluated before the next is built (what bounds a pass's memory); the last
        one is left to the caller."""
        compiled = self.compiled
        if (compiled is not None and len(tokens) <= self.settings.ubatch_size and not len(self.lora)
                and compiled.prompt(tokens, kv)):
            return
        ubatch = self.settings.ubatch_size
        for i in range(0, len(tokens), ubatch):
            if i:
                mx.eval([c.state for c in kv])
            self.model(mx.array(tokens[i : i + ubatch])[None], cache=kv)

    def _prompt_processed(self, slot: Slot, kv: list[Any], logits: mx.array) -> mx.array | None:
        """A prompt's last chunk went through: its last position's logits, to draw the first token from; None when
        the request wants no tokens (``n_predict`` 0), whose slot is then released with the prompt cached."""
        seq = slot.seq
        assert seq is not None
        self.prefilling.remove(slot)
        if seq.n_predict != 0:
            return logits
        mx.eval([c.state for c in kv])
        seq.prompt_done()
        self._release(slot, kv)
        return None

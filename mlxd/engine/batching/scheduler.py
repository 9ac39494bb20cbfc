"""Continuous batching over llama-server's slots, run by the model worker thread one step at a time.

Each step admits waiting requests into idle slots, runs one decode step for every generating slot (one forward
pass and one sampling call for the whole batch), then spends what is left of ``--batch-size`` on prompt chunks.

mlx_lm's ``BatchGenerator`` is not used: its samplers must be pure array functions (llama.cpp's chain keeps
per-request state on the host: penalties, DRY, mirostat), its stop handling is by token sequence (llama-server
matches text across token boundaries and withholds partial matches), and it has no slot or prompt-cache model.
The loop below is built on the same parts instead: mlx_lm's model code, its ``BatchKVCache``
(merge/extend/filter/extract) and its prompt-cache trie, and the same ``async_eval`` pipelining.

This module holds admission, slots and endings; prompt processing (and a prompt's first token) is in
``prefill.py``, the decode step in ``decode.py`` (its forward pass compiled in ``compiled.py``) and the speculative
step in ``speculative.py`` (its n-gram variant in ``spec_ngram.py``), mixed in.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable, Protocol

import mlx.core as mx
import mlx.nn as nn

from mlxd.engine.batching.batch import DecodeBatch
from mlxd.engine.batching.compiled import CompiledStep
from mlxd.engine.constraints import Constraints
from mlxd.engine.batching.counters import DecodeCounter
from mlxd.engine.batching.decode import Decoding
from mlxd.engine.batching.slots import idle as idle_slots
from mlxd.engine.batching.slots.restore import restore as restore_slots
from mlxd.engine.loading import kv_types
from mlxd.engine.batching.handle import RequestHandle, deferred_wakeups
from mlxd.engine.loading.lora import LoraSet
from mlxd.engine.speculative.ngram_draft import Lookups
from mlxd.engine.batching.prefill import PromptProcessing
from mlxd.engine.batching.prompt_cache.ram import PromptCache, adopt
from mlxd.engine.batching.sequence import Sequence
from mlxd.engine.speculative.ngram_step import NgramStep
from mlxd.engine.speculative.draft_model import DraftRows, SpecConfig, SpecStats, Speculating
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.slots.table import Resident, Slot, SlotRegistry, common_prefix
from mlxd.engine.types import ErrorEvent
from mlxd.errors import EngineError, RequestError

log = logging.getLogger("mlxd.engine.batching.scheduler")


class SamplerBackend(Protocol):
    """What the scheduler needs from the sampling chain."""

    def new(self, request: Any) -> Any:
        """A fresh per-request sampler (its state lives as long as the request)."""

    def greedy_bias(self, sampler: Any) -> dict[int, float] | None:
        """The logit bias of a sampler that is an argmax of the biased logits and nothing more, else None."""

    def sample(self, logits: mx.array, samplers: list[Any]) -> list[Any]:
        """Sample one token per row of ``logits`` [B, V]; each result has an ``id``."""


class BadInput(ValueError):
    """A request the worker found unusable after admission (for example a token id outside the vocabulary)."""


class Scheduler(PromptProcessing, Speculating, NgramStep, Decoding):
    """The batch state of one model; every method runs on the worker thread."""

    def __init__(
        self,
        model: nn.Module,
        *,
        decode: Callable[[list[int]], str],
        eos_ids: set[int],
        vocab_size: int,
        settings: WorkerSettings,
        n_ctx_slot: int,
        sampling: SamplerBackend,
        bos_id: int | None = None,
        constraints: Constraints | None = None,
        encode: Callable[[str], list[int]] | None = None,
        draft: nn.Module | None = None,
    ) -> None:
        self.model = model
        self.encode = encode  # text to token ids, for what a reasoning budget forces
        self.constraints = constraints  # makes a request's constraint into a Matcher (engine.constraints)
        self.bos_id = bos_id
        self.decode = decode
        self.eos_ids = eos_ids
        self.vocab_size = vocab_size
        self.settings = settings
        self.sampling = sampling
        self.slots = SlotRegistry(settings.n_parallel, n_ctx_slot, settings.slot_prompt_similarity)
        self.prompt_cache = PromptCache(settings.cache_ram_bytes)
        self._cache_idle = idle_slots.enabled(settings.cache_idle_slots, self.prompt_cache, settings.unified)
        # -ctk / -ctv: refused here (before serving) when the type or the model's head size cannot take it.
        self.kv_type = kv_types.fit(kv_types.resolve(
            settings.cache_type_k or "f16", settings.cache_type_v or "f16",
            explicit=settings.cache_type_k is not None or settings.cache_type_v is not None), model)
        # Speculative decoding (--spec-type draft-simple with -md): the draft model and its own cache type.
        self.draft = draft
        self.draft_kv = kv_types.resolve(settings.cache_type_k_draft or "f16", settings.cache_type_v_draft or "f16",
                                         explicit=bool(settings.cache_type_k_draft or settings.cache_type_v_draft))
        self.spec = SpecConfig(settings.spec_draft_n_max, settings.spec_draft_n_min, settings.draft_p_min)
        self.spec_stats = SpecStats()
        self._draft_rows = DraftRows()
        self._spec_k, self._spec_idle = settings.spec_draft_n_max, 0
        # The draft-free --spec-types: proposals from the sequences' own tokens (and lookup-cache files).
        self.ngram = Lookups.of(settings)
        if draft is not None or self.ngram is not None:
            for which, m in (("the model", model), ("the draft model", draft)):
                if m is not None and not all(kv_types.is_single(c)
                                             for c in kv_types.make_cache(m, kv_types.CHECKPOINT)):
                    raise EngineError(f"speculative decoding with {which}'s sliding-window or recurrent layers is "
                                      "not yet implemented by mlxd (their caches cannot drop refused proposals)")
            if draft is not None:
                self.draft_kv = kv_types.fit(self.draft_kv, draft)
            for slot in self.slots.slots:
                slot.speculative = True
            if settings.context_shift:
                raise EngineError("--context-shift with speculative decoding is not yet implemented by mlxd; use "
                                  "--no-context-shift")
        if settings.context_shift and self.kv_type.bits is not None:
            raise EngineError(f"--context-shift with a {self.kv_type.name} KV cache is not yet implemented by mlxd "
                              "(shifting re-rotates float keys); use --no-context-shift or an f16 cache")
        self.waiting: deque[RequestHandle] = deque()
        self.prefilling: list[Slot] = []
        self.batch = DecodeBatch()
        self.lora = LoraSet.empty()  # the model's adapters; set by the worker
        self._steps = 0
        # The decode step through mx.compile (engine.batching.compiled); not for a model that computes positions from the
        # decode batch's own cache list (the multimodal text view's per-row shifts), which the trace replaces.
        self.compiled = None if hasattr(model, "row_shift") else CompiledStep(model)
        self.compiled_draft = CompiledStep(draft) if draft is not None else None  # its one-token draft steps
        self.decodes = DecodeCounter()  # forward passes, for /metrics' n_decode_total
        self._end_reasoning_on_start: set[int] = set()  # id_task of waiting requests asked to end reasoning
        # The decode batch's bias rows, rebuilt when its rows change: (the rows' sequences, width, [B, V] or None).
        self._bias_rows: tuple[tuple[Sequence, ...], int, mx.array | None] = ((), 0, None)

    def new_cache(self) -> list[Any]:
        """A fresh per-layer cache of the configured KV type."""
        return kv_types.make_cache(self.model, self.kv_type)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.prefilling and not len(self.batch)

    # -- commands ------------------------------------------------------------------------------------------
    def add(self, handle: RequestHandle) -> None:
        self.waiting.append(handle)

    def cancel(self, handle: RequestHandle, message: str = "request cancelled") -> None:
        """Drop a request wherever it is; its slot is free and its cache discarded before this returns."""
        if handle in self.waiting:
            self.waiting.remove(handle)
            handle.push(ErrorEvent(message))
            return
        for slot in self.slots.busy():
            if slot.seq is not None and slot.seq.handle is handle:
                self._drop(slot, message)
                return

    def end_reasoning(self, handle: RequestHandle) -> None:
        """``reasoning_end``: the request's reasoning ends at its next token (once it starts, if still waiting)."""
        if handle in self.waiting:
            self._end_reasoning_on_start.add(handle.id_task)
            return
        for slot in self.slots.busy():
            if slot.seq is not None and slot.seq.handle is handle:
                slot.seq.end_reasoning()
                return

    def restore_slots(self) -> int:
        """The disk tier's most recent entries back in the empty slots (engine.batching.slots.restore)."""
        return restore_slots(self.slots, self.prompt_cache)

    def spill(self, deadline: float) -> int:
        """Write the slots' and the prompt cache's entries to the disk tier until ``deadline`` (worker stop)."""
        held = [r for slot in self.slots.slots if (r := slot.resident) is not None]
        residents = [(r.namespace, r.tokens, r.kv) for r in held if not r.published]
        try:
            return self.prompt_cache.spill(residents, deadline, [(r.namespace, r.tokens) for r in held])
        except Exception:  # the tier must never keep a worker from stopping
            log.exception("writing the prompt cache to disk failed")
            return 0

    def close(self) -> None:
        """Forget every cache (on the worker thread, before it ends: the arrays belong to its stream)."""
        for slot in self.slots.slots:
            slot.resident = slot.kv = None
        disk = self.prompt_cache.detach_disk()
        if disk is not None:
            disk.close()
        self.prompt_cache = PromptCache(0)
        self.batch = DecodeBatch()
        self._draft_rows = DraftRows()
        self._bias_rows = ((), 0, None)

    def cancel_all(self, message: str) -> None:
        for handle in list(self.waiting):
            self.cancel(handle, message)
        for slot in self.slots.busy():
            self._drop(slot, message)

    # -- one step ------------------------------------------------------------------------------------------
    def step(self) -> None:
        """Admit, prefill within the batch budget, then decode once (without continuous batching, prompts wait
        until the batch has drained, this step's decode included).

        Prompts go first so that a request that has just arrived gets its first token in this step rather than
        after one more decode step; the rows it completes join this step's decode.
        """
        self._admit()
        if self.prefilling and self.settings.cont_batching:
            self._prefill_phase()
        if len(self.batch):
            # Each token goes out as its phase ends, with one wake-up per reading event loop.
            with deferred_wakeups():
                try:
                    self._decode()
                except Exception as exc:  # a failure of the batched forward pass: no row can go on
                    log.exception("decode step failed")
                    for slot in list(self.batch.slots):
                        self._drop(slot, f"generation failed: {exc}")
        if self.prefilling and not self.settings.cont_batching and not len(self.batch):
            self._prefill_phase()

    def _prefill_phase(self) -> None:
        with deferred_wakeups():
            self._prefill(max(1, self.settings.batch_size - len(self.batch)))

    def _admit(self) -> None:
        for handle in list(self.waiting):
            if not self.slots.idle():
                return
            req = handle.request
            if not self._lora_ready(req):
                return  # first in line with other adapter scales: nothing overtakes it
            slot = self.slots.choose(req.prompt_tokens, req.cache_namespace, req.id_slot)
            if slot is None:
                continue  # pinned to a busy slot; later requests may still start
            self.waiting.remove(handle)
            try:
                self._start(slot, handle)
            except Exception as exc:
                self._fail_start(slot, handle, exc)

    def _lora_ready(self, req: Any) -> bool:
        """Whether the layers compute with the request's adapter snapshot, switching to it once no request runs.

        A batch never mixes snapshots: a request whose scales differ from the running ones waits until those
        finish; the switch happens here, between steps, so no forward pass sees two sets of scales.
        """
        if not len(self.lora) or req.lora is None:
            return True
        wanted = tuple(req.lora.get(i, 0.0) for i in range(len(self.lora)))
        if wanted == self.lora.applied:
            return True
        if self.slots.busy():
            return False
        self.lora.apply(wanted)
        return True

    def _start(self, slot: Slot, handle: RequestHandle) -> None:
        req = handle.request
        bad = [t for t in req.prompt_tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise BadInput(f"token id {bad[0]} is out of the vocabulary (n_vocab = {self.vocab_size})")
        seq = Sequence(
            req,
            handle,
            handle.id_task,
            self.sampling.new(req),
            self.decode,
            self.eos_ids,
            slot.n_ctx,
            self.settings.n_predict,
            self.settings.context_shift,
            self.encode,
        )
        if req.constraint is not None and self.constraints is not None:
            seq.matcher = self.constraints.matcher(req.constraint)
        if handle.id_task in self._end_reasoning_on_start:
            self._end_reasoning_on_start.discard(handle.id_task)
            seq.end_reasoning()
        # Fixed for the request's lifetime; a constrained row needs its mask before every draw, and a reasoning
        # budget may replace any draw with a forced token.
        # A logit bias alone (the usual way to ban a token) keeps a row greedy: it is added on the device.
        bias = self.sampling.greedy_bias(seq.sampler) if seq.matcher is None and seq.budget is None else None
        seq.plain_greedy, seq.greedy_bias = bias is not None, bias or {}
        slot.seq, slot.t_last_used = seq, time.monotonic()
        seq.t_prompt_start = time.perf_counter()
        if not seq.prompt:  # upstream answers an empty prompt at once, with nothing generated
            seq.prompt_done()
            self._release(slot, None)
            return
        if req.cache_prompt:
            kv, n = self._reuse(slot, req)
        else:
            kv, n = None, 0
            self._vacate(slot)
        slot.kv = kv if kv is not None else self.new_cache()
        seq.n_past = seq.n_cache = n
        seq.progress()  # b10621's first update, before any prompt token is computed (the cache's part only)
        self.prefilling.append(slot)
        if self._cache_idle:  # --cache-idle-slots: the other slots' caches, now that this one runs
            idle_slots.save_idle(self.slots, self.prompt_cache, clear=self.settings.unified)

    def _reuse(self, slot: Slot, req: Any) -> tuple[list[Any] | None, int]:
        """The longest cached prefix: the slot's own tokens, or any entry of the host prompt cache."""
        res = slot.resident
        if res is not None and res.namespace == req.cache_namespace:
            n = common_prefix(res.tokens, req.prompt_tokens)
            # The slot's own tokens, taken over without a copy, when nothing could cover more of the prompt:
            # all of them are a prefix of it, or they cover all of it that may come from a cache.
            if not self.prompt_cache.enabled or n >= min(len(res.tokens), len(req.prompt_tokens) - 1):
                slot.resident = None
                return adopt(res.tokens, res.kv, req.prompt_tokens)
        if not self.prompt_cache.enabled:
            slot.resident = None
            return None, 0
        log.debug("updating prompt cache")  # b10621's line for the same save-then-load
        self._vacate(slot)
        return self.prompt_cache.fetch(req.cache_namespace, req.prompt_tokens)

    def _vacate(self, slot: Slot) -> None:
        """As upstream, a slot's tokens move to the host prompt cache when the slot takes another request."""
        res, slot.resident = slot.resident, None
        if res is not None and not res.published and self.prompt_cache.enabled:
            self.prompt_cache.insert(res.namespace, res.tokens, res.kv)

    def _accept(self, slot: Slot, token: int, sampled: Any = None) -> bool:
        """Hand a token to its sequence; a failure there ends that request alone."""
        seq = slot.seq
        assert seq is not None
        try:
            return seq.accept(token, sampled)
        except Exception as exc:
            log.exception("token handling failed")
            seq.fail(f"generation failed: {exc}")
            return False

    def _retire(self, rows: list[int]) -> None:
        """Finished rows leave the batch; their slots keep their caches."""
        batch = self.batch
        leaving = [(batch.slots[i], batch.extract(i)) for i in rows]
        batch.remove(rows)
        for slot, kv in leaving:
            self._release(slot, kv)

    # -- endings -------------------------------------------------------------------------------------------
    def _release(self, slot: Slot, kv: list[Any] | None) -> None:
        """End the slot's request normally: final event (unless it failed), keep its cache, free the slot."""
        seq = slot.seq
        assert seq is not None
        if not seq.failed:
            seq.finish(slot.id)
        if kv is not None and not seq.failed and not seq.shifted:
            slot.resident = Resident(seq.request.cache_namespace, seq.cached_tokens(), kv)
        if not seq.failed:
            self.prompt_cache.observe_prompt(len(seq.prompt) - seq.n_cache, seq.t_prompt_ms / 1e3)
        slot.last, slot.seq, slot.kv, slot.t_last_used = seq, None, None, time.monotonic()

    def _drop(self, slot: Slot, message: str) -> None:
        """End the slot's request with an error; its cache is discarded."""
        seq = slot.seq
        if seq is None:
            return
        if slot in self.prefilling:
            self.prefilling.remove(slot)
        if slot in self.batch.slots:
            self.batch.remove([self.batch.row_of(slot)])
        if not seq.failed:
            seq.fail(message)
        slot.last, slot.seq, slot.kv, slot.resident = seq, None, None, None
        slot.t_last_used = time.monotonic()

    def _fail_start(self, slot: Slot, handle: RequestHandle, exc: Exception) -> None:
        if isinstance(exc, BadInput):
            handle.push(ErrorEvent(str(exc), "invalid_request_error", 400))
        elif isinstance(exc, RequestError):  # a constraint that does not compile, for one
            handle.push(ErrorEvent(exc.message, exc.type, exc.status))
        else:
            log.exception("request start failed")
            handle.push(ErrorEvent(f"request failed: {exc}"))
        if slot.seq is not None and slot.seq.handle is handle:
            slot.seq.failed = True
            self._drop(slot, "")

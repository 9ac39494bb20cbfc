"""The model worker: one thread that owns all MLX work of one loaded model.

The asyncio side calls ``submit`` (which refuses at once what can never run: a prompt larger than a slot's
context, a full queue) and reads events from the returned ``RequestHandle``. Everything else, including
cancellation, reaches the thread through its inbox and takes effect at its next step.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

import mlx.core as mx

from mlxd.engine import embed

from mlxd.engine.batching import context_shift

from mlxd.engine.loading import kv_types
from mlxd.engine.cpu.affinity import keep_on_one_cpu, pins, weight_bytes
from mlxd.engine.constraints import Constraints
from mlxd.engine.batching.counters import DecodeCounter
from mlxd.engine.batching.detokenize import fast_decoder
from mlxd.engine.batching.handle import RequestHandle, TrackedHandle
from mlxd.engine.loading.loader import LoadedModel
from mlxd.engine.loading.lora import LoraSet
from mlxd.engine.batching.samplers import ChainSampling, TokenizerVocab
from mlxd.engine.batching.scheduler import SamplerBackend, Scheduler
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.slots.actions import SlotActions
from mlxd.engine.batching.slots.table import Slot
from mlxd.engine.speculative.draft_model import check_draft
from mlxd.engine.threads import Job, start_on_parked_thread
from mlxd.engine.types import ErrorEvent, Event, FinalEvent, GenerationRequest
from mlxd.engine.loading.warmup import warm_up
from mlxd.errors import ContextOverflow, EngineError, InvalidRequest, QueueFull, Unavailable

log = logging.getLogger("mlxd.engine.batching.worker")
T = TypeVar("T")

class ModelWorker(SlotActions):
    """Serves generations for one loaded model with continuous batching over ``--parallel`` slots."""

    scheduler_class = Scheduler  # engine.vlm's worker puts its multimodal scheduler here

    def __init__(self, loaded: LoadedModel, settings: WorkerSettings, *, sampling: SamplerBackend | None = None,
                 lora: LoraSet | None = None, draft: LoadedModel | None = None) -> None:
        if settings.context_shift:
            reason = context_shift.unsupported_reason(loaded.model)
            if reason is not None:
                raise EngineError(
                    f"--context-shift is not supported for {loaded.name}: {reason}; use --no-context-shift"
                )
        if draft is not None:  # refused before serving: the draft must speak the target's vocabulary
            reason = check_draft(int(loaded.vocab_size), int(draft.vocab_size))
            if reason is not None:
                raise EngineError(f"draft model {draft.name}: {reason}")
        self.loaded = loaded
        self.draft = draft
        self.settings = settings
        self.n_ctx_slot = settings.n_ctx_slot(int(loaded.n_ctx_train))
        eos = set(int(t) for t in loaded.eos_token_ids)
        vocab_size = int(loaded.vocab_size)
        self.constraints = Constraints(loaded.tokenizer, vocab_size, sorted(eos))
        if sampling is None:
            sampling = ChainSampling(TokenizerVocab(loaded.tokenizer, vocab_size, sorted(eos)), self.n_ctx_slot)
        self.scheduler = self.scheduler_class(
            loaded.model,
            decode=fast_decoder(loaded.tokenizer, special=settings.special),
            eos_ids=eos,
            vocab_size=vocab_size,
            settings=settings,
            n_ctx_slot=self.n_ctx_slot,
            sampling=sampling,
            bos_id=getattr(loaded.tokenizer, "bos_token_id", None),
            constraints=self.constraints,
            encode=lambda text: list(loaded.tokenizer.encode(text, add_special_tokens=False)),
            draft=draft.model if draft is not None else None,
        )
        # The adapters attached to loaded.model (engine.loading.lora.attach_adapters); the scheduler sets their scales.
        self.lora = lora if lora is not None else LoraSet.empty()
        self.scheduler.lora = self.lora
        if settings.cache_disk:
            self._attach_disk(settings.cache_disk, settings.cache_disk_max)
        self._kv_info = kv_types.describe(self.scheduler.kv_type, loaded.model, self.n_ctx_slot)
        self._cv = threading.Condition()
        self._inbox: deque[tuple[str, RequestHandle]] = deque()
        self._actions: list[tuple[int, Callable[[Slot], int], Future[int]]] = []
        self._jobs: list[tuple[Callable[[], Any], Future[Any]]] = []  # embeddings, slot restores: between steps
        self._in_flight = 0  # submitted, terminal event not yet pushed
        self._next_task = 0
        self._accepting = False
        self._stopping = False
        self._spill_deadline = 0.0  # until when a stopping worker writes its prompt cache to the disk tier
        self._thread: Job | None = None  # the worker loop on its parked thread (engine.threads)
        self._weights = 0  # bytes of weights a token reads, and whether the worker pins: decided at start
        self._pins = False

    def _attach_disk(self, directory: str, max_mib: int) -> None:
        """Put the disk tier (``--cache-disk``) under the prompt cache, keyed by what produces this worker's KV."""
        from mlxd.engine.batching.prompt_cache import disk_format as prompt_disk_format
        from mlxd.engine.batching.prompt_cache import disk_tier as prompt_disk_tier
        from mlxd.engine.batching.prompt_cache.identity import identity

        sched = self.scheduler
        layer_kinds = prompt_disk_format.kinds(sched.new_cache())
        if layer_kinds is None:
            log.warning("--cache-disk: %s keeps sliding-window or recurrent caches, which the disk tier cannot "
                        "hold; the tier is not used for it", self.loaded.name)
            return
        adapters = [e["path"] for e in self.lora.entries()]
        ident = identity(self.loaded.path, dict(self.loaded.config), layer_kinds, adapters)
        store = prompt_disk_tier.open_store(directory, max_mib, ident)
        sched.prompt_cache.attach_disk(prompt_disk_tier.DiskTier(store, ident), sched.new_cache)
        log.info("--cache-disk %s: model %s, identity %s", store.root, self.loaded.name, ident[:12])

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker thread, after the warmup run unless ``--no-warmup``; requests are accepted from now on."""
        if self._thread is None and self.settings.warmup:
            warm_up(self.loaded)
            if self.draft is not None:
                warm_up(self.draft)
        with self._cv:
            if self._thread is not None:
                return
            self._accepting, self._stopping = True, False
            # Decided here: the parked thread is taken from the pool of pinned threads or of never-pinned ones.
            self._weights = weight_bytes(self.loaded.model) + (weight_bytes(self.draft.model) if self.draft else 0)
            self._pins = self.settings.pin_cpu and pins(self._weights)
            self._thread = start_on_parked_thread(self._run, name=f"mlxd-worker-{self.loaded.name}",
                                                  pinned=self._pins)
        if self.scheduler.prompt_cache.disk is not None:  # the slots as they were before a restart, then ready
            self._on_worker(self.scheduler.restore_slots).result()

    def stop(self, drain_timeout: float = 0.0, spill_timeout: float | None = None) -> None:
        """Refuse new requests, let running ones finish for up to ``drain_timeout`` seconds, then end the rest.

        With a disk tier, the prompt cache is then written to it for up to ``spill_timeout`` seconds (None: what
        is left of ``drain_timeout``)."""
        with self._cv:
            self._accepting = False
            thread = self._thread
            if thread is None:  # never started: nothing to drain, but the disk tier's hold on its store goes
                disk = self.scheduler.prompt_cache.detach_disk()
                if disk is not None:
                    disk.close()
                return
            deadline = time.monotonic() + max(0.0, drain_timeout)
            while self._in_flight and time.monotonic() < deadline:
                self._cv.wait(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
            self._spill_deadline = deadline if spill_timeout is None else time.monotonic() + max(0.0, spill_timeout)
            self._stopping = True
            self._cv.notify_all()
        try:
            thread.result()
        except Exception:  # noqa: BLE001 - the loop's own failure was logged where it happened
            pass
        with self._cv:
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._accepting

    def speculative_info(self) -> dict[str, Any] | None:
        """The speculative types in use, the draft model and the drafted and accepted totals (None without
        speculative decoding), for ``/props``."""
        ngram = self.scheduler.ngram
        if self.draft is None and ngram is None:
            return None
        stats = self.scheduler.spec_stats
        # In the order given, as b10621 joins them (the configuration admits only types mlxd serves); a draft model
        # without --spec-type is draft-simple.
        types = [t for t in self.settings.spec_type if t != "none"] or ["draft-simple"]
        info: dict[str, Any] = {"type": ",".join(types), "n_drafted": stats.drafted, "n_accepted": stats.accepted,
                                "n_steps": stats.steps}
        if self.draft is not None:
            info.update(draft_model=str(self.draft.path), n_max=self.settings.spec_draft_n_max,
                        n_min=self.settings.spec_draft_n_min, p_min=self.settings.draft_p_min)
        if ngram is not None and ngram.simple is not None:
            info.update(ngram_size_n=ngram.simple.size_n, ngram_size_m=ngram.simple.size_m)
        for cfg in ngram.maps if ngram is not None else ():
            kind = "ngram_map_k" if cfg.key_only else "ngram_map_k4v"
            info.update({f"{kind}_size_n": cfg.size_n, f"{kind}_size_m": cfg.size_m, f"{kind}_min_hits": cfg.min_hits})
        if ngram is not None and ngram.mod is not None:
            mod = ngram.mod.cfg
            info.update(ngram_mod_n_match=mod.n_match, ngram_mod_n_min=mod.n_min, ngram_mod_n_max=mod.n_max)
        if ngram is not None and ngram.cache is not None:  # the lookup-cache files it was loaded from
            info.update(lookup_cache_static=self.settings.lookup_cache_static,
                        lookup_cache_dynamic=self.settings.lookup_cache_dynamic)
        return info

    def kv_cache_info(self) -> dict[str, Any]:
        """The KV cache type and its memory per token and per slot (for ``/props``)."""
        return dict(self._kv_info)

    # -- requests -------------------------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> RequestHandle:
        """Queue a generation; raises ``ContextOverflow``, ``QueueFull``, ``InvalidRequest`` or ``Unavailable``."""
        n_prompt = len(request.prompt_tokens)
        if n_prompt >= self.n_ctx_slot:
            raise ContextOverflow(n_prompt, self.n_ctx_slot)
        if request.id_slot >= len(self.scheduler.slots):
            raise InvalidRequest("Invalid slot ID")
        request = self._snapshot_lora(request)
        with self._cv:
            if not self._accepting:
                raise Unavailable("the model is not accepting requests (it is stopping or not started)")
            limit = self.settings.n_parallel + self.settings.queue_max
            if self._in_flight >= limit:
                raise QueueFull(
                    f"server busy: all {self.settings.n_parallel} slots are in use and {self.settings.queue_max} "
                    "more requests are already waiting; retry later (more slots: --parallel)"
                )
            self._in_flight += 1
            self._next_task += 1
            handle = TrackedHandle(request, self._next_task, self._on_cancel, self._on_terminal)
            self._inbox.append(("submit", handle))
            self._cv.notify_all()
        return handle

    def end_reasoning(self, handle: RequestHandle) -> None:
        """``reasoning_end``: end the running request's reasoning at its next token (on the worker thread)."""
        with self._cv:
            self._inbox.append(("reasoning_end", handle))
            self._cv.notify_all()

    # -- LoRA ---------------------------------------------------------------------------------------------------
    def lora_adapters(self) -> list[dict[str, Any]]:
        """The attached adapters with their server-wide scales: ``[{"id", "path", "scale"}]``."""
        return self.lora.entries()

    def set_lora_scales(self, scales: dict[int, float]) -> None:
        """Replace the server-wide scales (unlisted adapters 0); requests submitted from now on use them."""
        self.lora.set_scales(scales)

    def _snapshot_lora(self, request: GenerationRequest) -> GenerationRequest:
        """Fix the request's adapter scales now, and keep its prompt-cache entries apart from other states."""
        if not len(self.lora):
            return request
        snapshot = self.lora.snapshot(request.lora)
        return dataclasses.replace(request, lora=dict(enumerate(snapshot)),
                                   cache_namespace=request.cache_namespace + self.lora.namespace(snapshot))

    def slots(self, debug: bool = False) -> list[dict[str, Any]]:
        """b10621's ``GET /slots`` body (``debug`` adds ``prompt`` and ``generated``, as LLAMA_SERVER_SLOTS_DEBUG)."""
        out = []
        for slot in self.scheduler.slots.slots:
            entry = slot.to_json(debug)
            if debug and "prompt" in entry:
                seq = slot.seq or slot.last  # may have moved on meanwhile: then the later request's prompt
                if seq is not None:
                    entry["prompt"] = self.loaded.tokenizer.decode(seq.prompt)
            out.append(entry)
        return out

    # -- embeddings (POST /embedding, /v1/embeddings): one forward pass on the worker thread, between steps ------
    def embeddings(self, inputs: list[list[int]], pooling: str, embd_normalize: int,
                   rows: tuple[int, int] | None = None) -> Future[list[embed.EmbeddingResult]]:
        """Queue the embeddings of ``inputs`` (``rows``: a reranker's yes/no rows, for ``rank`` pooling); the future
        holds one ``EmbeddingResult`` per input.

        Raises at once what b10621 refuses per input (engine.embed.check_inputs).
        """
        embed.check_inputs(inputs, pooling, ubatch_size=self.settings.ubatch_size, n_ctx_slot=self.n_ctx_slot,
                           vocab_size=self.scheduler.vocab_size)

        def job() -> list[embed.EmbeddingResult]:
            # The server-wide adapter scales apply, whatever snapshot the running generations use meanwhile.
            running = self.lora.applied if len(self.lora) else None
            if running is not None:
                self.lora.apply(self.lora.snapshot(None))
            try:
                # b10621 runs each input in a slot of its own, so a pass's busy slots are its inputs (at most
                # --parallel of them).
                return embed.embed(self.loaded.model, inputs, pooling, embd_normalize, self.settings.batch_size,
                                   rows, on_pass=lambda n: self.scheduler.decodes.count(
                                       min(n, self.settings.n_parallel)))
            finally:
                if running is not None:
                    self.lora.apply(running)

        return self._on_worker(job)

    def _on_worker(self, job: Callable[[], T]) -> Future[T]:
        """Run ``job`` on the worker thread, between two scheduler steps."""
        done: Future[T] = Future()
        with self._cv:
            if not self._accepting:
                raise Unavailable("the model is not accepting requests (it is stopping or not started)")
            self._jobs.append((job, done))
            self._cv.notify_all()
        return done

    def _run_jobs(self) -> None:
        with self._cv:
            jobs, self._jobs = self._jobs, []
        for job, done in jobs:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(job())
                except Exception as exc:
                    done.set_exception(exc)

    @property
    def decode_counter(self) -> DecodeCounter:
        """The forward passes this worker ran and their busy slots, for /metrics (engine.batching.counters)."""
        return self.scheduler.decodes

    @property
    def n_in_flight(self) -> int:
        return self._in_flight

    def _on_cancel(self, handle: RequestHandle) -> None:
        with self._cv:
            self._inbox.append(("cancel", handle))
            self._cv.notify_all()

    def _on_terminal(self) -> None:
        with self._cv:
            self._in_flight -= 1
            self._cv.notify_all()

    # -- the thread -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        # Before the first MLX call makes the stream, so that the stream's thread inherits the pin and policy
        # (engine.cpu.affinity).
        placement = keep_on_one_cpu() if self._pins else None
        if self.settings.pin_cpu and not self._pins:
            log.info("model worker left to the kernel's placement: its model reads %d MiB of weights a token, "
                     "a step is mostly matrix products (--worker-affinity auto)", self._weights // 2**20)
        if placement is not None:
            log.info("model worker pinned to CPU %d with its MLX stream thread, %s (--worker-affinity auto)",
                     placement.cpu, "batch scheduling" if placement.batch_policy else "normal scheduling (refused)")
        # The thread's default stream, its own since mlx 0.32: the parked thread keeps it for the next worker
        # (engine.threads), since mlx keeps a scheduler thread for every stream ever made.
        try:
            self._serve()
        except BaseException:
            log.exception("model worker %s failed", self.loaded.name)
            raise

    def _serve(self) -> None:
        """The worker loop: take commands, step the scheduler, stop when told."""
        while True:
            with self._cv:
                while (not self._inbox and not self._actions and not self._jobs and self.scheduler.idle
                       and not self._stopping):
                    self._cv.wait()
                commands = list(self._inbox)
                self._inbox.clear()
                stopping = self._stopping
            for kind, handle in commands:
                if kind == "submit":
                    self.scheduler.add(handle)
                elif kind == "reasoning_end":
                    self.scheduler.end_reasoning(handle)
                else:
                    self.scheduler.cancel(handle)
            if self._actions:
                self._run_slot_actions()
            if self._jobs and not stopping:
                self._run_jobs()
            if stopping:
                with self._cv:
                    abandoned, self._actions = self._actions, []
                    dropped, self._jobs = self._jobs, []
                for _, _, done in abandoned:
                    done.set_exception(Unavailable("the model was unloaded"))
                for _, job_done in dropped:
                    job_done.set_exception(Unavailable("the model was unloaded"))
                self.scheduler.cancel_all("the model was unloaded before the request finished")
                if self.scheduler.prompt_cache.disk is not None and time.monotonic() < self._spill_deadline:
                    t0 = time.monotonic()
                    n = self.scheduler.spill(self._spill_deadline)
                    log.info("prompt cache: %d entries written to the disk tier in %.2f s", n, time.monotonic() - t0)
                self.scheduler.close()
                return
            try:
                self.scheduler.step()
            except Exception:  # a bug in the loop itself: fail what runs, keep serving
                log.exception("scheduler step failed")
                self.scheduler.cancel_all("internal error in the model worker")
            if self.scheduler.idle:
                mx.clear_cache()  # give MLX's buffer cache back between bursts, as mlx_lm does

"""The decode step's forward pass through ``mx.compile``: one token per row of the decode batch (or a few: the
speculative verification and the draft's steps), on the batch's own KV caches, with shapes bucketed so that
recompiles stay rare.

A one-token step of a small model is mostly per-operation host work (the graph built in Python, one dispatch per
operation); a compiled step is one call that replays a traced graph with its elementwise runs fused. mlx-lm's
caches cannot be traced as they are: their write position and the length they hand to attention are Python ints,
which a trace would bake in (one compile per step). Here the step sees stand-ins for the caches (``_Solo``,
``_Rows``) whose position is an array input: the keys and values are written into the cache's preallocated
buffer with ``slice_update`` and attention reads the whole buffer, the positions past the write hidden by a mask.
The trace then depends only on the batch size, the new tokens per row and the buffer's capacity, which doubles
from 32 to 256 entries and then grows in steps of 256 (mlx-lm's own ``KVCache.step``; ``capacity_for``), so a
stream recompiles a few times in its first 256 tokens and then once per 256, and the batch once per row count it
has not had at that capacity, each new shape costing one trace of the model (compiled traces are kept by shape);
batches above ``MAX_ROWS`` rows decode uncompiled.

The real caches stay mlx-lm's ``KVCache`` / ``BatchKVCache`` (or mlxd's dtype-typed ones) throughout: after the
call their buffers are the step's outputs and their positions move on by the tokens fed, so prompt processing,
merging, filtering, extraction, the speculative roll-back and the prompt cache see nothing new (a cache that
carries right padding, mid-prefill, is left to the uncompiled pass). Quantized, sliding-window
and recurrent caches, LoRA adapters (their scales are Python numbers a trace would keep) and a model whose layers
cannot be traced this way (they read the position as a Python int) decode uncompiled.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache, KVCache

from mlxd.engine.fused import FusedDecoder
from mlxd.engine.kv_types import TypedBatchKV, TypedKV

log = logging.getLogger("mlxd.engine.compiled")

STEP = 256  # capacity bucket of the KV buffers past their first STEP entries, as mlx-lm's KVCache.step
SMALLEST = 32  # the smallest bucket; below STEP, buckets double


# Rows above which the step runs uncompiled. Every row count is a trace of its own per capacity bucket (a 12-layer
# model takes 10 to 25 ms to trace), and the gain falls as the rows' arithmetic outweighs the per-operation work
# (bench_step on tiny-llama with the fused pass and doubling buckets: 2.04x at 1 row, 1.66x at 8, 1.48x at 16,
# 1.13x at 32, 1.17x at 64): past 32 rows the traces would cost about what they save.
MAX_ROWS = 32

# mlx keeps its compiled traces in one process-wide map without a lock of its own, and a daemon may run several
# model workers at once (a pool of models, a swap whose new model loads before the old one drains): a compiled
# call (a lookup, and a trace on a miss) holds this lock. The call only builds the graph; evaluation runs outside.
_TRACES = threading.Lock()

_SOLO = (KVCache, TypedKV)
_ROWS = (BatchKVCache, TypedBatchKV)


class _Solo:
    """A one-sequence cache as the traced step sees it: the buffers and the write position (a scalar array)."""

    def __init__(self, keys: mx.array, values: mx.array, offset: mx.array) -> None:
        self.keys, self.values, self.offset = keys, values, offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        # As TypedKV, new entries take the buffer's dtype (a no-op for the checkpoint's own).
        self.keys = mx.slice_update(self.keys, keys.astype(self.keys.dtype), self.offset, axes=(2,))
        self.values = mx.slice_update(self.values, values.astype(self.values.dtype), self.offset, axes=(2,))
        return self.keys, self.values

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        """Query q (of ``n`` new positions) sees every position up to its own, as mlx-lm's causal mask."""
        cols = mx.arange(self.keys.shape[2])[None]
        return (cols <= self.offset + mx.arange(n)[:, None])[None, None]


class _Rows(_Solo):
    """A left-padded batched cache as the traced step sees it: one write column for all rows, per-row offsets."""

    def __init__(self, keys: mx.array, values: mx.array, idx: mx.array, offset: mx.array,
                 left_padding: mx.array) -> None:
        super().__init__(keys, values, offset)  # offset: each row's RoPE position [B]
        self.idx, self.left_padding = idx, left_padding

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.keys = mx.slice_update(self.keys, keys.astype(self.keys.dtype), self.idx, axes=(2,))
        self.values = mx.slice_update(self.values, values.astype(self.values.dtype), self.idx, axes=(2,))
        return self.keys, self.values

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        """As mlx-lm's batch mask: each row's own positions up to the query's, not its left padding."""
        cols = mx.arange(self.keys.shape[2])[None, None]
        keep = (cols <= self.idx + mx.arange(n)[None, :, None]) & (self.left_padding[:, None, None] <= cols)
        return keep[:, None]


def capacity_for(n: int) -> int:
    """The KV capacity a compiled step gives ``n`` entries: 32, 64, 128, 256, then multiples of 256.

    Attention reads the whole buffer, masked past the write position, and what it reads past it is wasted: the
    softmax's exponentials and both products grow with the capacity, not the context (on tiny-llama, 8 rows at
    40 positions step in 464 us with 64 entries and 758 us with 256; 32 rows in 1576 and 3101 us). Below 256
    entries the buckets double, so short contexts waste at most half, for three more traces per row count."""
    if n <= STEP:
        return max(SMALLEST, 1 << (n - 1).bit_length())
    return -(-n // STEP) * STEP


def _grow(cache: Any, used: int, n: int) -> None:
    """Fit the buffer to ``n`` more entries' bucket (one trace per bucket): grown, or cut back to a view."""
    cap = cache.keys.shape[2]
    want = capacity_for(used + n)
    if cap == want:
        return
    for name in ("keys", "values"):
        buf = getattr(cache, name)
        b, h, _, d = buf.shape
        buf = buf[..., : min(cap, want), :]
        if want > buf.shape[2]:
            buf = mx.concatenate([buf, mx.zeros((b, h, want - buf.shape[2], d), buf.dtype)], axis=2)
        setattr(cache, name, buf)


class CompiledStep:
    """The compiled forward pass of one model over a few new tokens per row (a decode step, a speculative
    verification or a draft's step); calls answer None where it does not apply."""

    def __init__(self, model: Callable[..., mx.array]) -> None:
        self.model = model
        # mlx-lm's llama family on the CPU device: the same pass in fewer operations (engine.fused).
        self.fused = FusedDecoder.of(model) if isinstance(model, nn.Module) else None
        self.enabled = True
        self.steps = 0  # compiled steps run (for tests and benchmarks)
        # One compiled function per cache kind and per output (the last position's logits or every position's):
        # a trace is keyed by its inputs' shapes only, so what differs in Python must differ by function.
        self._fns = {(kind, last): mx.compile(self._traced(kind, last)) for kind in ("solo", "rows")
                     for last in (True, False)}

    def _forward(self, tokens: mx.array, caches: list[Any], extra: list[mx.array], last: bool) -> mx.array:
        if self.fused is not None:
            return self.fused(tokens, caches, extra, last)
        logits = self.model(tokens, cache=caches)
        return logits[:, -1, :] if last else logits

    def _traced(self, kind: str, last: bool) -> Callable[..., list[mx.array]]:
        def solo(tokens: mx.array, offset: mx.array, extra: list[mx.array], kv: list[mx.array]) -> list[mx.array]:
            caches = [_Solo(kv[i], kv[i + 1], offset) for i in range(0, len(kv), 2)]
            logits = self._forward(tokens, caches, extra, last)
            return [logits] + [a for c in caches for a in (c.keys, c.values)]

        def rows(tokens: mx.array, idx: mx.array, offset: mx.array, left: mx.array, extra: list[mx.array],
                 kv: list[mx.array]) -> list[mx.array]:
            # Every layer's batched cache holds the same offsets and padding (they move together), so the first
            # layer's stand for all of them, and all take the moved offsets back.
            caches = [_Rows(kv[i], kv[i + 1], idx, offset, left) for i in range(0, len(kv), 2)]
            logits = self._forward(tokens, caches, extra, last)
            return [logits, offset + tokens.shape[1]] + [a for c in caches for a in (c.keys, c.values)]

        return solo if kind == "solo" else rows

    def _extra(self, cache: list[Any]) -> list[mx.array]:
        return self.fused.inputs(cache[0].keys.shape[2]) if self.fused is not None else []

    def __call__(self, tokens: mx.array, cache: list[Any]) -> mx.array | None:
        """The logits [B, V] of one step on ``tokens`` [B], the caches moved on by one; None: run it uncompiled."""
        return self.forward(tokens[:, None], cache, last=True)

    def forward(self, tokens: mx.array, cache: list[Any], last: bool = False) -> mx.array | None:
        """The logits [B, N, V] (``last``: [B, V]) of ``tokens`` [B, N], the caches moved on by N; None: run it
        uncompiled."""
        if (not self.enabled or not cache or tokens.shape[0] > MAX_ROWS
                or any(c.keys is None or getattr(c, "_right_padding", None) is not None for c in cache)):
            return None
        kinds = {type(c) for c in cache}
        if kinds <= set(_SOLO):
            step = self._step_solo
        elif kinds <= set(_ROWS):
            step = self._step_rows
        else:
            return None
        try:
            logits = step(tokens, cache, last)
        except Exception as exc:  # a trace that failed leaves the caches as they were (only grown)
            if self.fused is None:  # a layer that needs the position as a Python int, for one: decode uncompiled
                log.warning("decode step not compiled for this model (%s: %s); decoding uncompiled",
                            type(exc).__name__, exc)
                self.enabled = False
                return None
            log.warning("fused decode step failed for this model (%s: %s); compiling the model's own forward pass",
                        type(exc).__name__, exc)
            self.fused = None
            return self.forward(tokens, cache, last)
        self.steps += 1
        return logits

    def _step_solo(self, tokens: mx.array, cache: list[Any], last: bool) -> mx.array:
        n, offset = tokens.shape[1], cache[0].offset
        for c in cache:
            _grow(c, c.offset, n)
        kv = [a for c in cache for a in (c.keys, c.values)]
        extra = self._extra(cache)
        with _TRACES:
            out = self._fns[("solo", last)](tokens, mx.array(offset, dtype=mx.int32), extra, kv)
        for i, c in enumerate(cache):
            c.keys, c.values = out[1 + 2 * i], out[2 + 2 * i]
            c.offset += n
        return out[0]

    def _step_rows(self, tokens: mx.array, cache: list[Any], last: bool) -> mx.array:
        n, first = tokens.shape[1], cache[0]
        for c in cache:
            _grow(c, c._idx, n)
        idx = mx.array(first._idx, dtype=mx.int32)
        kv = [a for c in cache for a in (c.keys, c.values)]
        extra = self._extra(cache)
        with _TRACES:
            out = self._fns[("rows", last)](tokens, idx, first.offset, first.left_padding, extra, kv)
        moved = out[1]
        for i, c in enumerate(cache):
            c.keys, c.values = out[2 + 2 * i], out[3 + 2 * i]
            c._idx += n
            # One array for all layers is safe: BatchKVCache rebinds its offsets, never updates them in place.
            c.offset = moved
        return out[0]

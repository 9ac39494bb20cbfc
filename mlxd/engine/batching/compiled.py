"""The decode step's forward pass through ``mx.compile``: one token per row of the decode batch (or a few: the
speculative verification and the draft's steps), on the batch's own KV caches, with shapes bucketed so that
recompiles stay rare.

A one-token step of a small model is mostly per-operation host work (the graph built in Python, one dispatch per
operation); a compiled step is one call that replays a traced graph with its elementwise runs fused. mlx-lm's
caches cannot be traced as they are, so the step sees stand-ins for them (engine.batching.step_caches) whose write
position is an array input. The trace then depends only on the batch size, the new tokens per row and the buffers'
capacity, which goes from 32 to 64 entries, then up to 256 in steps of 32 and past it in steps of 256
(``capacity_for``), so a stream recompiles up to eight times in its first 256 tokens and then once per 256, and
the batch once per row count it has not had at that capacity, each new shape costing one trace of the model
(compiled traces are kept by shape); batches above ``MAX_ROWS`` rows decode uncompiled. For mlx-lm's llama
family on the CPU device the traced pass is engine.batching.fused's, the same arithmetic in fewer operations.

The real caches stay mlx-lm's (or engine.loading.kv_types') throughout: after the call their buffers are the step's
outputs and their positions move on by the tokens fed, so prompt processing, merging, filtering, extraction, the
speculative roll-back and the prompt cache see nothing new (a cache that carries right padding, mid-prefill, is left
to the uncompiled pass). Sliding-window and recurrent caches, LoRA adapters (their scales are Python numbers a
trace would keep) and a model whose layers cannot be traced this way (they read the position as a Python int)
decode uncompiled.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from mlxd.engine.batching import step_caches as sc
from mlxd.engine.batching.fused import FusedDecoder

log = logging.getLogger("mlxd.engine.batching.compiled")

# Rows above which the step runs uncompiled. Every row count is a trace of its own per capacity bucket (a 12-layer
# model takes 10 to 25 ms to trace), and the gain falls as the rows' arithmetic outweighs the per-operation work
# (bench_step on tiny-llama with the fused pass and doubling buckets: 2.04x at 1 row, 1.66x at 8, 1.48x at 16,
# 1.13x at 32, 1.17x at 64): past 32 rows the traces would cost about what they save.
MAX_ROWS = 32

# The longest run of prompt tokens ``CompiledStep.prompt`` takes: past it a pass's arithmetic outweighs its graph's
# per-operation cost, and each length is a trace.
SHORT_PROMPT = 32

# mlx keeps its compiled traces in one process-wide map without a lock of its own, and a daemon may run several
# model workers at once (a pool of models, a swap whose new model loads before the old one drains): a compiled
# call (a lookup, and a trace on a miss) holds this lock. The call only builds the graph; evaluation runs outside.
_TRACES = threading.Lock()

Quant = tuple[int, int] | None  # a quantized cache's (group_size, bits); None for float caches


class CompiledStep:
    """The compiled forward pass of one model over a few new tokens per row (a decode step, a speculative
    verification, a draft's step or a short prompt); calls answer None where it does not apply."""

    def __init__(self, model: Callable[..., mx.array]) -> None:
        self.model = model
        # mlx-lm's llama family on the CPU device: the same pass in fewer operations (engine.batching.fused).
        self.fused = FusedDecoder.of(model) if isinstance(model, nn.Module) else None
        self.enabled = True
        self.steps = 0  # compiled steps run (for tests and benchmarks)
        # One compiled function per cache layout and output (the last position's logits or every position's): a
        # trace is keyed by its inputs' shapes only, so what differs in Python must differ by function.
        self._fns: dict[tuple[bool, Quant, bool], Callable[..., list[mx.array]]] = {}
        # Each layer's buffers as the caches of one sequence hold them ((heads, last dim, dtype) per buffer, by
        # cache type and layer), learnt from the steps: what an empty cache opens with (``prompt``).
        self._layouts: dict[tuple[type, int], list[tuple[int, int, mx.Dtype]]] = {}

    def _forward(self, tokens: mx.array, caches: list[Any], extra: list[mx.array], last: bool) -> mx.array:
        if self.fused is not None:
            return self.fused(tokens, caches, extra, last)
        logits = self.model(as_rows(tokens), cache=caches)
        return logits[:, -1, :] if last else logits

    def _fn(self, batched: bool, quant: Quant, last: bool) -> Callable[..., list[mx.array]]:
        key = (batched, quant, last)
        if key not in self._fns:
            self._fns[key] = mx.compile(self._traced(batched, quant, last))
        return self._fns[key]

    def _traced(self, batched: bool, quant: Quant, last: bool) -> Callable[..., list[mx.array]]:
        per_layer = 2 if quant is None else 6

        def layers(kv: list[mx.array]) -> list[list[mx.array]]:
            return [kv[i : i + per_layer] for i in range(0, len(kv), per_layer)]

        def solo(tokens: mx.array, offset: mx.array, extra: list[mx.array], kv: list[mx.array]) -> list[mx.array]:
            caches = [sc.Solo(a, offset) if quant is None else sc.QuantizedSolo(a, offset, *quant)
                      for a in layers(kv)]
            logits = self._forward(tokens, caches, extra, last)
            return [logits] + [a for c in caches for a in sc.buffers(c)]

        def rows(tokens: mx.array, idx: mx.array, offset: mx.array, left: mx.array, extra: list[mx.array],
                 kv: list[mx.array]) -> list[mx.array]:
            # Every layer's batched cache holds the same offsets and padding (they move together), so the first
            # layer's stand for all of them, and all take the moved offsets back.
            caches = [sc.Rows(a, idx, offset, left) if quant is None else sc.QuantizedRows(a, idx, offset, left, *quant)
                      for a in layers(kv)]
            logits = self._forward(tokens, caches, extra, last)
            return [logits, offset + _new_per_row(tokens)] + [a for c in caches for a in sc.buffers(c)]

        return rows if batched else solo

    def _extra(self, capacity: int) -> list[mx.array]:
        return self.fused.inputs(capacity) if self.fused is not None else []

    def __call__(self, tokens: mx.array, cache: list[Any]) -> mx.array | None:
        """The logits [B, V] of one step on ``tokens`` [B], the caches moved on by one; None: run it uncompiled."""
        return self.forward(tokens, cache, last=True)

    def forward(self, tokens: mx.array, cache: list[Any], last: bool = False) -> mx.array | None:
        """The logits [B, N, V] (``last``: [B, V]) of ``tokens`` [B, N], the caches moved on by N; None: run it
        uncompiled. ``tokens`` [B] is one token per row, a decode step's own layout: the graph then has no
        reshapes to add a tokens axis and take it away again."""
        if (not self.enabled or not cache or tokens.shape[0] > MAX_ROWS
                or any(c.keys is None or getattr(c, "_right_padding", None) is not None for c in cache)):
            return None
        layouts = {sc.KINDS.get(type(c)) for c in cache}
        layout = layouts.pop() if len(layouts) == 1 else None
        if layout is None:  # a layer whose cache the step cannot stand in for (sliding window, recurrent)
            return None
        batched, quantized = layout
        quant = (cache[0].group_size, cache[0].bits) if quantized else None
        try:
            logits = (self._step_rows if batched else self._step_solo)(tokens, cache, quant, last)
        except Exception as exc:  # a trace that failed leaves the caches as they were (only fitted)
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

    def prompt(self, tokens: list[int], cache: list[Any]) -> bool:
        """Run a short run of prompt tokens (at most ``SHORT_PROMPT``) into one sequence's caches through the
        compiled pass; False where it does not apply (the caller then runs them uncompiled), with the caches as
        they were.

        A short prompt's own forward pass costs what its graph's nodes cost, like a decode step's: compiled it
        is replayed, and on the CPU device it is the fused pass's. The tokens are right-padded to a multiple of 4
        (or a power of two below 4), so that a capacity bucket holds ten traces at most (a trace costs what
        MAX_ROWS says); the padding's keys and values land past the caches' positions, which are then moved back
        over them, as mlx-lm's ``trim`` does: masked from every later query, and overwritten by the tokens that
        follow. Like the compiled decode step's, the values are the uncompiled pass's up to float rounding (its
        products span more rows and attend over the whole buffer), and greedy tokens stay the same
        (tests/engine/test_compiled_step.py)."""
        n = len(tokens)
        if not 0 < n <= SHORT_PROMPT or not cache or any(type(c) not in sc.KINDS or sc.KINDS[type(c)][0]
                                                         for c in cache):
            return False
        empty = [c for c in cache if c.keys is None]
        if empty and not self._open(empty, cache):
            return False
        padded = -(-n // 4) * 4 if n > 4 else 1 << (n - 1).bit_length()
        if self.forward(mx.array([tokens + [0] * (padded - n)]), cache, last=True) is None:
            for c in empty:
                c.keys = c.values = None
            return False
        for c in cache:
            c.offset -= padded - n
        return True

    def _open(self, empty: list[Any], cache: list[Any]) -> bool:
        """Give the ``empty`` layers of ``cache`` zero buffers of no capacity in the layout the steps have seen
        (``fit`` then sizes them); False when one is not known yet."""
        layouts = {id(c): self._layouts.get((type(c), i)) for i, c in enumerate(cache)}
        if any(layouts[id(c)] is None for c in empty):
            return False
        for c in empty:
            sc.set_buffers(c, [mx.zeros((1, heads, 0, width), dtype) for heads, width, dtype in layouts[id(c)] or []])
        return True

    def _step_solo(self, tokens: mx.array, cache: list[Any], quant: Quant, last: bool) -> mx.array:
        n, offset = _new_per_row(tokens), cache[0].offset
        if (type(cache[0]), 0) not in self._layouts:  # once per cache type, not at every step
            for i, c in enumerate(cache):
                self._layouts[type(c), i] = [(int(b.shape[1]), int(b.shape[3]), b.dtype) for b in sc.buffers(c)]
        for c in cache:
            sc.fit(c, c.offset, n)
        kv = [a for c in cache for a in sc.buffers(c)]
        extra = self._extra(kv[0].shape[2])
        with _TRACES:
            out = self._fn(False, quant, last)(tokens, mx.array(offset, dtype=mx.int32), extra, kv)
        width = len(kv) // len(cache)
        for i, c in enumerate(cache):
            sc.set_buffers(c, out[1 + width * i : 1 + width * (i + 1)])
            c.offset += n
        return out[0]

    def _step_rows(self, tokens: mx.array, cache: list[Any], quant: Quant, last: bool) -> mx.array:
        n, first = _new_per_row(tokens), cache[0]
        for c in cache:
            sc.fit(c, c._idx, n)
        idx = mx.array(first._idx, dtype=mx.int32)
        kv = [a for c in cache for a in sc.buffers(c)]
        extra = self._extra(kv[0].shape[2])
        with _TRACES:
            out = self._fn(True, quant, last)(tokens, idx, first.offset, first.left_padding, extra, kv)
        moved, width = out[1], len(kv) // len(cache)
        for i, c in enumerate(cache):
            sc.set_buffers(c, out[2 + width * i : 2 + width * (i + 1)])
            c._idx += n
            # One array for all layers is safe: BatchKVCache rebinds its offsets, never updates them in place.
            c.offset = moved
        return out[0]


def as_rows(tokens: mx.array) -> mx.array:
    """``tokens`` as [B, N], where [B] is one token per row (a decode step's layout)."""
    return tokens if tokens.ndim == 2 else tokens[:, None]


def _new_per_row(tokens: mx.array) -> int:
    """The new tokens per row of ``tokens``: [B, N], or [B] for one each."""
    return int(tokens.shape[1]) if tokens.ndim == 2 else 1

"""The KV caches as a compiled decode step sees them (engine.batching.compiled): buffers of a bucketed capacity and a write
position that is an array, so that a trace serves every step of a bucket.

mlx-lm's caches keep their write position and the length they hand to attention as Python ints, which a trace
would bake in. The stand-ins here take the real cache's buffers and positions as the traced function's inputs:
new keys and values go into the buffers with ``slice_update`` at the write position, attention reads the whole
buffer, and a mask hides what lies past each query's position (and, in a batch, each row's left padding). The real
caches stay mlx-lm's (or engine.loading.kv_types') throughout: after the call their buffers are the step's outputs.

Float caches hold a keys and a values buffer; quantized ones (``-ctk q8_0``) a (packed, scales, biases) triple
for each, which new entries join through ``mx.quantize`` as ``QuantizedKVCache`` writes them, and their stand-ins
carry ``bits`` and ``group_size``, which is how mlx-lm's attention picks its quantized kernel.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache

from mlxd.engine.loading.kv_types import BatchQuantizedKVCache, QuantKV, TypedBatchKV, TypedKV

STEP = 256  # capacity bucket of the KV buffers past their first STEP entries, as mlx-lm's KVCache.step
SMALLEST = 32  # the smallest bucket, and the growth of the buckets below STEP past the second

# The real cache types a compiled step takes, by layout: one sequence or a left-padded batch, float or quantized.
KINDS: dict[type, tuple[bool, bool]] = {  # type -> (batched, quantized)
    KVCache: (False, False), TypedKV: (False, False), QuantKV: (False, True),
    BatchKVCache: (True, False), TypedBatchKV: (True, False), BatchQuantizedKVCache: (True, True),
}


def capacity_for(n: int) -> int:
    """The KV capacity a compiled step gives ``n`` entries: 32, 64, then multiples of 32 up to 256, then of 256.

    Attention reads the whole buffer, masked past the write position, and what it reads past it is wasted: the
    softmax's exponentials and both products grow with the capacity, not the context (on tiny-llama, 8 rows at
    40 positions step in 464 us with 64 entries and 758 us with 256; 32 rows at 150 positions in 1167 us with 176
    and 1516 us with 256). Between 64 and 256 entries the buckets grow by 32, where doubling wasted up to half at
    a cost that grows with the rows: 32 streams of 128 tokens over HTTP decode 1.08 to 1.13 x faster than with
    doubling buckets, for four more traces per row count (docs/benchmarks.md, section 7)."""
    if n <= 2 * SMALLEST:
        return max(SMALLEST, 1 << (n - 1).bit_length())
    if n <= STEP:
        return -(-n // SMALLEST) * SMALLEST
    return -(-n // STEP) * STEP


def buffers(cache: Any) -> list[mx.array]:
    """A real cache's buffers, keys then values (one array each, or a quantized triple each)."""
    if isinstance(cache.keys, tuple):
        return [*cache.keys, *cache.values]
    return [cache.keys, cache.values]


def set_buffers(cache: Any, arrays: Sequence[mx.array]) -> None:
    half = len(arrays) // 2
    if half == 1:
        cache.keys, cache.values = arrays
    else:
        cache.keys, cache.values = tuple(arrays[:half]), tuple(arrays[half:])


def fit(cache: Any, used: int, n: int) -> None:
    """Fit a real cache's buffers to ``n`` more entries' bucket (one trace per bucket): grown with zeros, or cut
    back to a view."""
    arrays = buffers(cache)
    cap, want = arrays[0].shape[2], capacity_for(used + n)
    if cap == want:
        return
    fitted = []
    for buf in arrays:
        buf = buf[..., : min(cap, want), :]
        if want > buf.shape[2]:
            b, h, have, d = buf.shape
            buf = mx.concatenate([buf, mx.zeros((b, h, want - have, d), buf.dtype)], axis=2)
        fitted.append(buf)
    set_buffers(cache, fitted)


class Solo:
    """One sequence's cache: its buffers and the write position, a scalar array (also every query's RoPE
    position)."""

    def __init__(self, arrays: Sequence[mx.array], offset: mx.array) -> None:
        self.keys: Any = arrays[0]
        self.values: Any = arrays[1]
        self.offset = offset

    @property
    def write_at(self) -> mx.array:
        return self.offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        # As TypedKV, new entries take the buffer's dtype (a no-op for the checkpoint's own).
        at = self.write_at
        self.keys = mx.slice_update(self.keys, keys.astype(self.keys.dtype), at, axes=(2,))
        self.values = mx.slice_update(self.values, values.astype(self.values.dtype), at, axes=(2,))
        return self.keys, self.values

    @property
    def capacity(self) -> int:
        return int(buffers(self)[0].shape[2])

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        """Query q (of ``n`` new positions) sees every position up to its own, as mlx-lm's causal mask."""
        if n == 1:  # a decode step: the same mask from three graph nodes instead of six
            return (mx.arange(self.capacity) <= self.offset).reshape(1, 1, 1, -1)
        cols = mx.arange(self.capacity)[None]
        return (cols <= self.offset + mx.arange(n)[:, None])[None, None]


class Rows(Solo):
    """A left-padded batch's cache: one write column for all rows, each row's RoPE position and left padding."""

    def __init__(self, arrays: Sequence[mx.array], idx: mx.array, offset: mx.array, left_padding: mx.array) -> None:
        super().__init__(arrays, offset)  # offset: each row's RoPE position [B]
        self.idx, self.left_padding = idx, left_padding

    @property
    def write_at(self) -> mx.array:
        return self.idx

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        """As mlx-lm's batch mask: each row's own positions up to the query's, not its left padding."""
        if n == 1:
            cols = mx.arange(self.capacity)
            keep = (cols <= self.idx) & (self.left_padding[:, None] <= cols)
            return keep.reshape(-1, 1, 1, self.capacity)
        cols = mx.arange(self.capacity)[None, None]
        keep = (cols <= self.idx + mx.arange(n)[None, :, None]) & (self.left_padding[:, None, None] <= cols)
        return keep[:, None]


class _Quantized:
    """Keys and values as (packed, scales, biases) triples, new entries quantized as ``QuantizedKVCache`` does."""

    group_size: int
    bits: int
    keys: Any
    values: Any
    write_at: mx.array

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        at = self.write_at
        new_k = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        new_v = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        self.keys = tuple(mx.slice_update(b, x, at, axes=(2,)) for b, x in zip(self.keys, new_k))
        self.values = tuple(mx.slice_update(b, x, at, axes=(2,)) for b, x in zip(self.values, new_v))
        return self.keys, self.values


class QuantizedSolo(_Quantized, Solo):
    def __init__(self, arrays: Sequence[mx.array], offset: mx.array, group_size: int, bits: int) -> None:
        Solo.__init__(self, arrays, offset)
        self.keys, self.values = tuple(arrays[:3]), tuple(arrays[3:])
        self.group_size, self.bits = group_size, bits


class QuantizedRows(_Quantized, Rows):
    def __init__(self, arrays: Sequence[mx.array], idx: mx.array, offset: mx.array, left_padding: mx.array,
                 group_size: int, bits: int) -> None:
        Rows.__init__(self, arrays, idx, offset, left_padding)
        self.keys, self.values = tuple(arrays[:3]), tuple(arrays[3:])
        self.group_size, self.bits = group_size, bits

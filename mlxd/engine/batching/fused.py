"""The decode step's forward pass for mlx-lm's llama-family models on the CPU device, in fewer operations.

On the CPU device a compiled decode step costs what its operation count costs: every node of the graph is
scheduled, allocated and handed to the MLX stream's thread, 1 to 2 us each, against a fraction of that in
arithmetic on a small model. mlx's fast kernels have no CPU implementation and run as their decomposed fallbacks,
and mlx-lm's model code, written for devices where they are single kernels, spends most of a step's nodes on work
a decode step can share or skip:

- each layer's RoPE computes its angles from scratch (an arange, an exp, a sine and a cosine, then slices and a
  concatenation), for the queries and again for the keys;
- every product of a 3-D activation is flattened and unflattened around the 2-D one.

Here activations stay 2-D (``[tokens, hidden]``), weights are transposed once outside the trace, and RoPE is one
elementwise pass over the queries (their attention scale folded in) and one over the keys, with cosines and sines
read from a table that the layer's own rope module computed once. On tiny-llama a one-token step goes from 184
graph nodes to 87 (docs/benchmarks.md, section 7). Joining the q/k/v and gate/up products into one each saved no
further time here, and OpenBLAS rounds a joined product differently at some sizes, so they stay the modules' own.

Every value is the same arithmetic as in mlx-lm's forward pass on this device, so the logits are bit for bit the
compiled model's (tests/engine/test_fused_step.py):

- table row ``p`` is the rope module applied at position ``p`` to a float32 probe of ones and zeros: ``1 * cos -
  0 * sin`` is the cosine the fallback computes, cast like it to the dtype of what it rotates, and likewise the
  sine;
- the fallback's ``x1 * cos - x2 * sin`` and ``x1 * sin + x2 * cos`` are ``x * C + swap(x) * S`` with ``C = [cos,
  cos]`` and ``S = [-sin, sin]``: equal in IEEE arithmetic, and ``swap`` is a product with a permutation matrix,
  whose other terms are exact zeros;
- attention is the fallback's own sequence of operations (a key head's query heads are the rows of one product,
  the same dot products) in the same common dtype, the queries scaled by the same float32 scale cast to it; with
  a quantized cache (``-ctk q8_0``) it is mlx-lm's quantized attention, as the model calls it.

Which models: mlx-lm's ``llama`` (``mistral`` too), ``qwen2`` and ``qwen3`` modules, every layer full attention,
the rope an ``nn.RoPE`` or ``Llama3RoPE`` over the whole head. Any other model, and any other device (where RoPE,
RMSNorm and attention are single kernels), decodes through the model's own forward pass, compiled all the same
(engine.batching.compiled).
"""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.activations import swiglu
from mlx_lm.models.base import quantized_scaled_dot_product_attention
from mlx_lm.models.rope_utils import Llama3RoPE

from mlxd.engine.cpu.attention import softmax

log = logging.getLogger("mlxd.engine.batching.fused")

_FAMILY = {"mlx_lm.models.llama", "mlx_lm.models.qwen2", "mlx_lm.models.qwen3"}
_ROPES = (nn.RoPE, Llama3RoPE)


class FusedDecoder:
    """The forward pass over a few new tokens per row on the compiled step's cache stand-ins (engine.batching.compiled)."""

    def __init__(self, model: nn.Module) -> None:
        inner = model.model
        self.model, self.inner = model, inner
        a = inner.layers[0].self_attn
        self.n_heads, self.n_kv, self.head_dim = int(a.n_heads), int(a.n_kv_heads), _head_dim(a)
        self.rope = a.rope
        self.tied = bool(getattr(model.args, "tie_word_embeddings", False))
        self._table: mx.array | None = None
        self._swap = _swap_matrix(self.head_dim, self.rope.traditional)
        self._transposed: dict[int, tuple[mx.array, mx.array]] = {}

    @classmethod
    def of(cls, model: nn.Module) -> "FusedDecoder | None":
        """The fused pass for ``model``, or None where it does not apply (another family or device, a layer it
        does not know)."""
        if mx.default_device() != mx.cpu or type(model).__module__ not in _FAMILY:
            return None
        why = _unsupported(model)
        if why is not None:
            log.info("decode step through the model's own forward pass (%s)", why)
            return None
        return cls(model)

    def inputs(self, capacity: int) -> list[mx.array]:
        """The arrays a traced pass reads besides tokens and caches: the RoPE table for positions below
        ``capacity`` ([positions, 2 * head_dim]: C then S, in float32, as the fallback computes them before it casts
        them to the queries' dtype; it only grows, so traces stay few) and the swap."""
        if self._table is None or self._table.shape[0] < capacity:
            self._table = self._rope_table(capacity)
        return [self._table, self._swap]

    def _rope_table(self, capacity: int) -> mx.array:
        d, half = self.head_dim, self.head_dim // 2
        traditional = self.rope.traditional
        probe = np.zeros(d, np.float32)
        probe[slice(0, None, 2) if traditional else slice(0, half)] = 1.0  # the output: cos and sin, by layout
        positions = mx.arange(capacity, dtype=mx.int32)
        cs = self.rope(mx.broadcast_to(mx.array(probe), (capacity, 1, 1, d)), offset=positions)[:, 0, 0]
        if traditional:
            cos, sin = cs[:, 0::2], cs[:, 1::2]
            c = mx.stack([cos, cos], axis=-1).reshape(capacity, d)
            s = mx.stack([-sin, sin], axis=-1).reshape(capacity, d)
        else:
            cos, sin = cs[:, :half], cs[:, half:]
            c, s = mx.concatenate([cos, cos], -1), mx.concatenate([-sin, sin], -1)
        table = mx.concatenate([c, s], -1)
        mx.eval(table)
        return table

    def __call__(self, tokens: mx.array, cache: list[Any], extra: list[mx.array], last: bool) -> mx.array:
        """Logits [B, N, V] (``last``: [B, V]) of ``tokens`` [B, N] (or [B], one each) on the stand-in caches."""
        table, swap = extra
        B, N = (int(tokens.shape[0]), 1) if tokens.ndim == 1 else tokens.shape
        d = self.head_dim
        h = self.inner.embed_tokens(tokens if tokens.ndim == 1 else tokens.reshape(B * N))  # [B * N, D]
        offset = cache[0].offset  # a scalar, or one position per row
        pos = offset if N == 1 else (offset[:, None] if offset.ndim else offset) + mx.arange(N)
        cs = table[pos].reshape(-1, 1, N, 2 * d)  # [B or 1, 1, N, 2d]
        rot = _Rotation(cs[..., :d], cs[..., d:], swap)
        mask = cache[0].make_mask(N)
        for block, kv in zip(self.inner.layers, cache):
            h = h + self._attention(block.self_attn, block.input_layernorm(h), kv, rot, mask, B, N)
            m, x = block.mlp, block.post_attention_layernorm(h)
            h = h + self._linear(m.down_proj, swiglu(self._linear(m.gate_proj, x), self._linear(m.up_proj, x)))
        h = self.inner.norm(h)
        embed = self.inner.embed_tokens
        if not self.tied:
            logits = self._linear(self.model.lm_head, h)
        elif type(embed) is nn.Embedding:
            logits = h @ self._weight_t(embed)
        else:
            logits = embed.as_linear(h)
        if N == 1 and last:
            return logits  # [B, V] already: no reshape and slice to build
        logits = logits.reshape(B, N, -1)
        return logits[:, -1, :] if last else logits

    def _linear(self, m: nn.Module, x: mx.array) -> mx.array:
        """``m(x)``; for a plain ``nn.Linear`` its product with the weight transposed once, outside the trace (a
        transposed view read by the same BLAS call), where ``m(x)`` transposes it as a graph node every step.

        (The residual sum cannot join the product in ``addmm``: OpenBLAS adds the residual before the product's
        partial sums once the inner dimension spans more than one block, 384 here, which rounds differently.)"""
        if type(m) is not nn.Linear:
            return m(x)
        weight_t = self._weight_t(m)
        return mx.addmm(m["bias"], x, weight_t) if "bias" in m else x @ weight_t

    def _weight_t(self, m: nn.Module) -> mx.array:
        weight = m["weight"]
        known = self._transposed.get(id(m))
        if known is None or known[0] is not weight:  # a module's weight replaced since: transpose the new one
            known = (weight, weight.T)
            mx.eval(known[1])
            self._transposed[id(m)] = known
        return known[1]

    def _attention(self, a: nn.Module, x: mx.array, kv: Any, rot: "_Rotation", mask: mx.array, B: int,
                   N: int) -> mx.array:
        d, nq, nk = self.head_dim, self.n_heads, self.n_kv
        q, k, v = self._linear(a.q_proj, x), self._linear(a.k_proj, x), self._linear(a.v_proj, x)
        if "q_norm" in a:  # qwen3 normalises each head before RoPE
            q, k = a.q_norm(q.reshape(B * N, nq, d)), a.k_norm(k.reshape(B * N, nk, d))
        q, k, v = _heads(q, B, N, nq, d), _heads(k, B, N, nk, d), _heads(v, B, N, nk, d)
        q, k = rot(q), rot(k)
        keys, values = kv.update_and_fetch(k, v)
        if hasattr(kv, "bits"):  # a quantized cache (-ctk q8_0): mlx-lm's quantized attention, which scales q itself
            out = quantized_scaled_dot_product_attention(q, keys, values, scale=a.scale, mask=mask,
                                                         group_size=kv.group_size, bits=kv.bits)
            out = out.transpose(0, 2, 1, 3)
        else:
            # As the fallback: mixed dtypes attend in their common type (a bfloat16 model with an f16 cache), and
            # the scale is a float32 number cast to it.
            common = mx.result_type(q, keys, values)
            q, keys, values = q.astype(common), keys.astype(common), values.astype(common)
            out = _attend(q * mx.array(a.scale, mx.float32).astype(common), keys, values, mask, nk)
        return self._linear(a.o_proj, out.reshape(B * N, nq * d))


class _Rotation:
    """One step's RoPE for every layer: ``x * C + swap(x) * S``, the table's float32 values cast to the dtype of
    what they rotate (as the fallback casts its cosines and sines), once per dtype."""

    def __init__(self, c: mx.array, s: mx.array, swap: mx.array) -> None:
        self.c, self.s, self.swap = c, s, swap
        self._cast: dict[mx.Dtype, tuple[mx.array, mx.array, mx.array]] = {}

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype not in self._cast:
            self._cast[x.dtype] = (self.c.astype(x.dtype), self.s.astype(x.dtype), self.swap.astype(x.dtype))
        c, s, swap = self._cast[x.dtype]
        return x * c + (x @ swap) * s


def _heads(x: mx.array, B: int, N: int, heads: int, d: int) -> mx.array:
    """Rows of ``B * N`` tokens as ``[B, heads, N, d]`` (for one token a reshape alone)."""
    if N == 1:
        return x.reshape(B, heads, 1, d)
    return x.reshape(B, N, heads, d).transpose(0, 2, 1, 3)


def _attend(q: mx.array, k: mx.array, v: mx.array, mask: mx.array, n_kv: int) -> mx.array:
    """``mx.fast.scaled_dot_product_attention``'s CPU fallback on scaled queries [B, nq, N, d] and a boolean mask;
    the output as [B, N, nq, d]."""
    B, nq, N, d = q.shape
    rep = nq // n_kv
    if N == 1:  # the query heads of a key head as the rows of one product: the same dot products
        scores = q.reshape(B, n_kv, rep, d) @ k.swapaxes(-1, -2)
        mask = mask.reshape(mask.shape[0], 1, 1, -1)
    else:
        scores = (q.reshape(B, n_kv, rep, N, d) @ mx.expand_dims(k, 2).swapaxes(-1, -2)).reshape(B, nq, N, -1)
    scores = mx.where(mask, scores, mx.array(mx.finfo(scores.dtype).min, scores.dtype))
    probs = softmax(scores)  # its exponentials one kernel of the compiled step, built for this CPU
    if N == 1:
        return probs @ v  # [B, n_kv, rep, d]: the query heads in order, one token
    out = (probs.reshape(B, n_kv, rep, N, -1) @ mx.expand_dims(v, 2)).reshape(B, nq, N, d)
    return out.transpose(0, 2, 1, 3)


def _swap_matrix(d: int, traditional: bool) -> mx.array:
    """The permutation that swaps the two halves of a head (``traditional``: each pair), as a [d, d] matrix."""
    m = np.zeros((d, d), np.float32)
    for j in range(d):
        m[j ^ 1 if traditional else (j + d // 2) % d, j] = 1.0
    return mx.array(m)


def _unsupported(model: nn.Module) -> str | None:
    """Why ``model`` is not of the shape this pass computes, or None."""
    inner = getattr(model, "model", None)
    blocks = list(getattr(inner, "layers", []))
    if not blocks or getattr(inner, "pipeline_size", 1) != 1:
        return "no plain stack of layers"
    first = blocks[0].self_attn
    for block in blocks:
        a = block.self_attn
        if getattr(block, "use_sliding", False):
            return "sliding-window layers"
        d = _head_dim(a)
        if type(a.rope) not in _ROPES or a.rope.dims != d or _rope_key(a.rope) != _rope_key(first.rope):
            return f"a {type(a.rope).__name__} rope"
        if (a.n_heads, a.n_kv_heads, d) != (first.n_heads, first.n_kv_heads, _head_dim(first)):
            return "layers of different shapes"
    return None


def _head_dim(attn: nn.Module) -> int:
    """The head size, from the query projection's outputs (mlx-lm's qwen2 does not keep it)."""
    proj = attn.q_proj
    out = proj["weight"].shape[0] if "weight" in proj else proj.linear["weight"].shape[0]  # an adapted layer
    return int(out) // int(attn.n_heads)


def _rope_key(rope: nn.Module) -> tuple[Any, ...]:
    freqs = getattr(rope, "_freqs", None)
    return (type(rope), rope.dims, rope.traditional, getattr(rope, "base", None), getattr(rope, "scale", None),
            None if freqs is None else tuple(np.array(freqs).tolist()))

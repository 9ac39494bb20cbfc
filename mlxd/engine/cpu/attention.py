"""Attention on the CPU device with its exponentials in a fused kernel built for the machine's CPU.

On the CPU device ``mx.fast.scaled_dot_product_attention`` falls back to composed operations whose softmax is a
kernel of mlx's library, built for a generic x86-64: one element at a time on one thread, its ``exp`` calling
libm's ``fmaf`` through the PLT. In a prompt pass the exponentials (heads x tokens x positions) are the largest
part of that single-threaded work. Here the same arithmetic runs with ``exp(scores - max)`` as one ``mx.compile``d
elementwise kernel, which ``--cpu-jit auto`` has mlx build for this CPU (engine.cpu.jit): a 443-token prompt pass of
a 180M-parameter float32 llama takes 2.1 to 2.2 s against 2.5 to 2.6 s (2 vCPUs, Sapphire Rapids; the last
position's logits within 2e-4 of 15, the same argmax). The decode step's own attention (engine.batching.fused)
uses the same softmax, which ``mx.compile`` then fuses into the step's kernels.

``install`` puts :func:`attention` in the place of ``mx.fast.scaled_dot_product_attention``, the one name every
mlx-lm model reaches through ``mlx_lm.models.base``, when the kernels are built for this CPU and MLX runs on it; it
takes float32 on the CPU device, without attention sinks, and hands everything else to mlx's own.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import mlx.core as mx

_mlx_attention: Callable[..., mx.array] = mx.fast.scaled_dot_product_attention


@partial(mx.compile, shapeless=True)
def _shifted_exp(scores: mx.array, peak: mx.array) -> mx.array:
    return mx.exp(scores - peak)


def softmax(scores: mx.array) -> mx.array:
    """Softmax over the last axis, its exponentials one fused kernel (float32: what ``precise=True`` computes)."""
    e = _shifted_exp(scores, mx.max(scores, axis=-1, keepdims=True))
    return e / mx.sum(e, axis=-1, keepdims=True)


def attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: None | str | mx.array = None,
              **rest: Any) -> mx.array:
    """``mx.fast.scaled_dot_product_attention`` with :func:`softmax`, for float32 on the CPU device."""
    if (any(value is not None and value is not False for value in rest.values()) or q.dtype != mx.float32
            or mx.default_device() != mx.cpu or q.shape[1] % k.shape[1]):
        return _mlx_attention(q, k, v, scale=scale, mask=mask, **rest)
    B, n_q, L, d = q.shape
    n_kv, S = k.shape[1], k.shape[2]
    rep = n_q // n_kv  # the query heads of a key head, as rows of one product
    scores = (q * scale).reshape(B, n_kv, rep, L, d) @ mx.expand_dims(k, 2).swapaxes(-1, -2)
    if isinstance(mask, str):  # "causal": query i sees the positions up to its own, the last L of S
        mask = (mx.arange(L)[:, None] + (S - L)) >= mx.arange(S)[None]
    if mask is not None:
        mask = _grouped(mask, n_kv, rep)
        if mask.dtype == mx.bool_:  # the lowest float, not -inf: a row masked whole (padding) stays finite
            scores = mx.where(mask, scores, mx.array(mx.finfo(scores.dtype).min, scores.dtype))
        else:
            scores = scores + mask
    return (softmax(scores) @ mx.expand_dims(v, 2)).reshape(B, n_q, L, v.shape[-1])


def _grouped(mask: mx.array, n_kv: int, rep: int) -> mx.array:
    """A mask for [B, n_q, L, S] (or what broadcasts to it) for the scores' [B, n_kv, rep, L, S]."""
    if mask.ndim < 3:
        return mask
    if mask.ndim == 3:
        mask = mask[None]
    b, h = mask.shape[:2]
    return mask.reshape(b, 1, 1, *mask.shape[2:]) if h == 1 else mask.reshape(b, n_kv, rep, *mask.shape[2:])


def install() -> None:
    """Serve ``mx.fast.scaled_dot_product_attention`` through :func:`attention` (the process's MLX stays on the CPU)."""
    mx.fast.scaled_dot_product_attention = attention

"""``--context-shift``: when a slot's context is full, drop ``n_discard`` tokens after the first ``n_keep``.

llama.cpp removes the cells and adds ``-n_discard`` to the positions of every later cell. MLX models cache keys
after RoPE, so the later keys are rotated back by ``n_discard`` positions with the layer's own RoPE module: a
rotation by ``a`` then by ``b`` is a rotation by ``a + b``, so each key ends exactly where a fresh computation at
its new position would put it. That holds for plain RoPE; other position schemes are refused up front.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache


def unsupported_reason(model: nn.Module) -> str | None:
    """Why this model's caches cannot be shifted, or None when they can."""
    layers = getattr(model, "layers", None)
    if not layers:
        return "the model does not expose its layers"
    for layer in layers:
        rope = getattr(getattr(layer, "self_attn", None), "rope", None)
        if not isinstance(rope, nn.RoPE):
            return f"layer attention uses {type(rope).__name__}, not plain RoPE"
    return None


def plan(n_past: int, n_ctx: int, n_keep: int, n_discard: int, prompt_len: int, has_bos: bool) -> tuple[int, int]:
    """(n_keep, n_discard) as llama-server computes them for a full slot."""
    keep = prompt_len if n_keep < 0 else n_keep
    if has_bos:
        keep += 1
    keep = min(n_ctx - 4, keep)
    discard = n_discard if n_discard else (n_past - keep) // 2
    return keep, discard


def shift(model: nn.Module, kv: list[Any], n_keep: int, n_discard: int) -> list[Any]:
    """A single sequence's per-layer caches with ``[n_keep, n_keep + n_discard)`` removed and later keys moved."""
    out = []
    for layer, cache in zip(model.layers, kv):
        keys, values = cache.keys[..., : cache.offset, :], cache.values[..., : cache.offset, :]
        tail = keys[..., n_keep + n_discard :, :]
        shape = tail.shape
        # One position per row: RoPE at offset -n_discard rotates every key back by the same n_discard positions.
        moved = layer.self_attn.rope(tail.reshape(-1, 1, shape[-1]), offset=-n_discard).reshape(shape)
        new = KVCache()
        new.keys = mx.concatenate([keys[..., :n_keep, :], moved.astype(keys.dtype)], axis=2)
        new.values = mx.concatenate([values[..., :n_keep, :], values[..., n_keep + n_discard :, :]], axis=2)
        new.offset = new.keys.shape[2]
        out.append(new)
    return out

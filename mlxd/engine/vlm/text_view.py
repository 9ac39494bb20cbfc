"""A multimodal model's language model, seen as the scheduler sees an mlx-lm model: ``model(tokens, cache=...)``
returns logits [B, L, V].

mlx-vlm's language models keep multimodal RoPE state on the module (``_rope_deltas``, ``_position_ids``) for the
one generation they run; under continuous batching several prompts with different images decode together, so
that state would belong to whichever prompt ran last. The view therefore computes every call's position ids
itself: each row's cache offset, plus the row's own shift (its ``rope_delta``: how many positions its images
saved), looked up through ``row_shift`` for the decode batch and 0 for a text-only prompt. ``row_shift`` is the
scheduler's, so a view serves one scheduler: the daemon loads a model for each worker.
"""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn


class TextView(nn.Module):
    """The language model of an mlx-vlm model with explicit positions; ``vlm`` is the whole model."""

    def __init__(self, vlm: nn.Module) -> None:
        super().__init__()
        self.vlm = vlm
        self.language_model = vlm.language_model
        # Qwen-VL style models take 3-axis positions (time, height, width) and say so by get_rope_index.
        self.mrope = hasattr(self.language_model, "get_rope_index")
        # Per-row shifts for a cache list (the decode batch's); None for prompts, whose shift is 0 or explicit.
        self.row_shift: Callable[[list[Any], int], list[int] | None] = lambda cache, rows: None

    @property
    def layers(self) -> list[nn.Module]:
        return self.language_model.layers

    def make_cache(self) -> list[Any]:
        make = getattr(self.language_model, "make_cache", None)
        if make is not None:
            return make()
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in self.layers]

    def __call__(self, inputs: mx.array, cache: list[Any] | None = None, inputs_embeds: mx.array | None = None,
                 position_ids: mx.array | None = None, **extra: Any) -> mx.array:
        if self.mrope and position_ids is None:
            shifts = self.row_shift(cache or [], inputs.shape[0])
            position_ids = positions(cache, inputs.shape[0], inputs.shape[1], shifts)
        kwargs: dict[str, Any] = dict(extra)
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        out = self.language_model(inputs, inputs_embeds=inputs_embeds, cache=cache, **kwargs)
        return out.logits if hasattr(out, "logits") else out


def positions(cache: list[Any] | None, rows: int, length: int, shifts: list[int] | None) -> mx.array:
    """3-axis position ids [3, B, L]: each row's cache offset (logical, padding excluded) plus its shift."""
    offset: Any = 0
    if cache:
        offset = cache[0].offset
    if isinstance(offset, mx.array):
        start = offset.reshape(-1)[:rows].astype(mx.int32)
    else:
        start = mx.full((rows,), int(offset), mx.int32)
    if shifts:
        start = start + mx.array(shifts, mx.int32)
    pos = start[:, None] + mx.arange(length, dtype=mx.int32)[None, :]
    return mx.broadcast_to(pos[None], (3, rows, length))

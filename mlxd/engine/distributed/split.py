"""How one model is cut across the ranks of an ``mx.distributed`` group: ``--split-mode row`` and ``layer``.

``row`` (tensor parallelism) is mlx-lm's own ``model.shard(group)``: every rank holds a slice of every projection
and the partial products are summed across the group, so every rank ends with the same logits.

``layer`` (pipeline parallelism) is written here once for every family whose decoder layers mlx-lm keeps in a
``layers`` list (llama, qwen2, qwen3 and most others): mlx-lm pipelines only a few families, each with code of its
own. Each rank keeps a contiguous range of layers (in ``--tensor-split`` proportions) and drops the rest before any
weight is read, so that its cache list is its own layers' (the attention mask reads the first cache's offset). The
first kept layer takes the hidden state from the previous rank, the last one passes it on, and the last rank's
final hidden state is summed with zeros from the others so every rank holds it bit for bit and samples the same
token from it.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from mlxd.errors import EngineError

SPLIT_MODES = ("none", "layer", "row")


def layer_ranges(n_layers: int, proportions: list[float]) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` layer ranges, one per rank, sized by ``proportions`` (cumulative rounding)."""
    total = sum(proportions)
    if len(proportions) == 0 or total <= 0 or any(p < 0 for p in proportions):
        raise EngineError(f"--tensor-split {','.join(map(str, proportions))}: give one non-negative share per "
                          "machine (front end first), at least one of them positive")
    bounds, acc = [0], 0.0
    for share in proportions:
        acc += share
        bounds.append(round(n_layers * acc / total))
    ranges = [(bounds[i], bounds[i + 1]) for i in range(len(proportions))]
    empty = [rank for rank, (a, b) in enumerate(ranges) if a == b]
    if empty:
        raise EngineError(f"--split-mode layer: {n_layers} layers over {len(proportions)} machines leaves rank(s) "
                          f"{empty} without a layer; change --tensor-split or use fewer machines")
    return ranges


def decoder(model: nn.Module) -> Any:
    """The module that holds the decoder ``layers`` list (``model.model`` in mlx-lm's text families)."""
    for holder in (getattr(model, "model", None), getattr(getattr(model, "language_model", None), "model", None)):
        if holder is not None and isinstance(getattr(holder, "layers", None), list):
            return holder
    raise EngineError(f"--split-mode layer: {type(model).__module__} keeps no decoder `layers` list mlxd can cut")


class Stage(nn.Module):
    """One kept layer; the first of a rank receives the hidden state, the last sends it on and shares the result."""

    def __init__(self, inner: nn.Module, *, first: bool, last: bool, group: mx.distributed.Group) -> None:
        super().__init__()
        self.inner = inner
        self._first, self._last, self._group = first, last, group

    def __getattr__(self, key: str) -> Any:
        # Code that inspects a layer (the fused pass's support check, cache makers) sees the layer it wraps.
        try:
            return super().__getattr__(key)
        except AttributeError:
            if key == "inner" or "inner" not in self:
                raise
            return getattr(self["inner"], key)

    def __call__(self, h: mx.array, *args: Any, **kwargs: Any) -> mx.array:
        rank, size = self._group.rank(), self._group.size()
        if self._first and rank > 0:
            h = mx.distributed.recv(h.shape, h.dtype, rank - 1, group=self._group)
        h = self.inner(h, *args, **kwargs)
        if not self._last:
            return h
        if rank < size - 1:
            sent = mx.distributed.send(h, rank + 1, group=self._group)
            h = mx.depends(mx.zeros_like(h), sent)
            # A prompt chunk whose logits nobody reads evaluates only the caches: tie the send to this layer's
            # cache (as mlx-lm's own pipelines do), or the next rank would wait for it forever.
            cache: Any = kwargs.get("cache", args[1] if len(args) > 1 else None)
            if getattr(cache, "keys", None) is not None:
                cache.keys = mx.depends(cache.keys, sent)
        return mx.distributed.all_sum(h, group=self._group)  # the last rank's state, on every rank


def pipeline(model: nn.Module, group: mx.distributed.Group, proportions: list[float]) -> tuple[int, int]:
    """Keep this rank's layers of ``model`` (lazy weights: call before they are evaluated); its ``[start, end)``."""
    holder = decoder(model)
    layers = list(holder.layers)
    start, end = layer_ranges(len(layers), proportions)[group.rank()]
    kept = layers[start:end]
    holder.layers = [Stage(layer, first=i == 0, last=i == len(kept) - 1, group=group) for i, layer in enumerate(kept)]
    return start, end


def tensor_parallel(model: nn.Module, group: mx.distributed.Group) -> None:
    """mlx-lm's ``shard`` for the family, refused where the family has none or the heads do not divide."""
    shard = getattr(model, "shard", None)
    if shard is None:
        raise EngineError(f"--split-mode row: mlx-lm has no tensor-parallel shard for {type(model).__module__}; "
                          "use --split-mode layer")
    args = getattr(model, "args", None)
    size = group.size()
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(args, name, None)
        if isinstance(heads, int) and heads % size:
            raise EngineError(f"--split-mode row: the model's {heads} {name.replace('_', ' ')} do not divide over "
                              f"{size} machines; use --split-mode layer or {size - 1 or 1} --rpc peers fewer")
    shard(group)


def cut(model: nn.Module, mode: str, group: mx.distributed.Group, proportions: list[float]) -> str:
    """Cut ``model`` for this rank; a line saying which share it holds."""
    if mode == "row":
        tensor_parallel(model, group)
        return f"rows 1/{group.size()} of every layer"
    start, end = pipeline(model, group, proportions)
    return f"layers {start}..{end - 1}"

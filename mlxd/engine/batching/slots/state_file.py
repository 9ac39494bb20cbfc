"""A slot's resident tokens and keys/values as a file (``POST /slots/N?action=save|restore``).

The file is safetensors: per layer ``L.keys`` and ``L.values`` [1, heads, tokens, dim] (for a quantized KV cache
``L.keys.0`` .. ``L.keys.2``: packed values, scales and biases), and in the metadata the tokens (JSON), the cache
namespace, so that a restored prefix is reused only by requests of the same kind, the KV cache type, so that a
file is restored only into a cache of the same type, and what wrote it (mlxd.engine.batching.slots.identity): the weights'
digest, the architecture, the layer count, each layer's KV shape and the slot context. A file restores only into
the model that wrote it, and into a slot whose context holds its tokens (a smaller context that still fits is fine).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlxd.engine.loading.kv_types import QuantKV, TypedKV
from mlxd.engine.batching.slots.identity import SlotOwner
from mlxd.engine.batching.slots.table import Resident
from mlxd.errors import EngineError

FORMAT = "mlxd-slot-2"  # -1 files carry no owner: refused


class SlotFileError(EngineError):
    """A slot file that does not hold a cache this model can use (a restore turns it into b10621's refusal)."""


def _kind(cache: Any) -> str:
    """The cache type a layer is kept in: "model", a float dtype, or "qBITS/GROUP"."""
    if isinstance(cache, QuantKV):
        return f"q{cache.bits}/{cache.group_size}"
    if isinstance(cache, TypedKV):
        return str(cache.kv_dtype)
    return "model"


def _shape(array: mx.array) -> list[int]:
    """A layer's KV row shape: [heads, dim] of a [1, heads, tokens, dim] array."""
    return [int(array.shape[1]), int(array.shape[3])]


def save(resident: Resident | None, path: Path, owner: SlotOwner) -> int:
    """Write a slot's resident cache (None: an empty slot) to ``path``, with ``owner``, the model that computed
    it; returns the number of tokens written."""
    if resident is None:
        resident = Resident("raw", [], [])
    arrays: dict[str, mx.array] = {}
    kinds = set()
    shapes: list[list[int]] = []
    for i, cache in enumerate(resident.kv):
        if not isinstance(cache, (KVCache, QuantKV)):
            raise SlotFileError(f"a {type(cache).__name__} cannot be saved to a slot file")
        if cache.offset != len(resident.tokens):
            raise SlotFileError(f"layer {i} holds {cache.offset} tokens, the slot {len(resident.tokens)}")
        kinds.add(_kind(cache))
        if isinstance(cache, QuantKV):
            assert cache.keys is not None and cache.values is not None
            for j in range(3):
                arrays[f"{i}.keys.{j}"] = cache.keys[j][..., : cache.offset, :]
                arrays[f"{i}.values.{j}"] = cache.values[j][..., : cache.offset, :]
            shapes.append(_shape(cache.keys[0]))
        else:
            arrays[f"{i}.keys"] = cache.keys[..., : cache.offset, :]
            arrays[f"{i}.values"] = cache.values[..., : cache.offset, :]
            shapes.append(_shape(cache.keys))
    metadata = {"format": FORMAT, "tokens": json.dumps(resident.tokens), "namespace": resident.namespace,
                "kv_type": ",".join(sorted(kinds)) or "model", "model": owner.model, "arch": owner.arch,
                "n_layer": str(len(resident.kv)), "kv_shapes": json.dumps(shapes), "n_ctx": str(owner.n_ctx)}
    with open(path, "wb") as f:
        mx.save_safetensors(f, arrays, metadata)
    return len(resident.tokens)


def _check_owner(path: Path, metadata: dict[str, str], owner: SlotOwner, n_tokens: int, n_layer: int) -> None:
    """Refuse a file that another model wrote, or whose tokens the slot cannot hold."""
    if metadata.get("arch") != owner.arch:
        raise SlotFileError(f"{path.name} was saved from a {metadata.get('arch')} model; this one is {owner.arch}")
    if n_tokens and metadata.get("n_layer") != str(n_layer):
        raise SlotFileError(f"{path.name} was saved from a model with {metadata.get('n_layer')} layers; this one "
                            f"has {n_layer}")
    if metadata.get("model") != owner.model:
        raise SlotFileError(f"{path.name} was saved from another model (weights digest "
                            f"{str(metadata.get('model'))[:12]}, this one {owner.model[:12]})")
    if n_tokens > owner.n_ctx:
        raise SlotFileError(f"{path.name} holds {n_tokens} tokens, more than this slot's context {owner.n_ctx}")


def load(path: Path, like: list[Any], owner: SlotOwner) -> Resident | None:
    """Read a slot file (None: it holds an empty slot); ``like`` is a fresh cache of the model to match, ``owner``
    the model itself."""
    try:
        # mlx's stub unions every mx.load form; safetensors with return_metadata gives (arrays, string metadata).
        arrays, metadata = cast(tuple[dict[str, mx.array], dict[str, str]],
                                mx.load(str(path), format="safetensors", return_metadata=True))
    except Exception as exc:
        raise SlotFileError(f"{path.name} is not a slot file: {exc}") from exc
    if metadata.get("format") != FORMAT:
        raise SlotFileError(f"{path.name} is not an mlxd slot file")
    try:
        tokens = [int(t) for t in json.loads(metadata.get("tokens", "[]"))]
        shapes = json.loads(metadata.get("kv_shapes", "[]"))
    except (ValueError, TypeError) as exc:
        raise SlotFileError(f"{path.name} has unreadable metadata: {exc}") from exc
    _check_owner(path, metadata, owner, len(tokens), len(like))
    if not tokens:
        return None
    wanted = ",".join(sorted({_kind(c) for c in like}))
    if metadata.get("kv_type", "model") != wanted:
        raise SlotFileError(f"{path.name} holds a {metadata.get('kv_type', 'model')} KV cache; this model keeps "
                            f"{wanted}")
    kv: list[Any] = []
    n_arrays = 0
    for i, fresh in enumerate(like):
        if isinstance(fresh, QuantKV):
            keys = tuple(arrays.get(f"{i}.keys.{j}") for j in range(3))
            values = tuple(arrays.get(f"{i}.values.{j}") for j in range(3))
            if any(x is None or x.shape[2] != len(tokens) for x in (*keys, *values)):
                raise SlotFileError(f"{path.name} does not match this model's cache (layer {i})")
            cache: Any = QuantKV(group_size=fresh.group_size, bits=fresh.bits)
            cache.keys, cache.values, cache.offset = keys, values, len(tokens)
            n_arrays += 6
        else:
            k, v = arrays.get(f"{i}.keys"), arrays.get(f"{i}.values")
            if k is None or v is None or not isinstance(fresh, KVCache) or k.shape[2] != len(tokens):
                raise SlotFileError(f"{path.name} does not match this model's cache (layer {i})")
            if i >= len(shapes) or _shape(k) != shapes[i] or _shape(v)[0] != shapes[i][0]:
                raise SlotFileError(f"{path.name} does not match this model's cache (layer {i} shape)")
            cache = TypedKV(fresh.kv_dtype) if isinstance(fresh, TypedKV) else KVCache()
            cache.keys, cache.values, cache.offset = k, v, k.shape[2]
            n_arrays += 2
        kv.append(cache)
    if len(arrays) != n_arrays:
        raise SlotFileError(f"{path.name} was saved from a model with another number of layers")
    return Resident(metadata.get("namespace", "raw"), tokens, kv)

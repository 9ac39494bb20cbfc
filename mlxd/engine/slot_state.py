"""A slot's resident tokens and keys/values as a file (``POST /slots/N?action=save|restore``).

The file is safetensors: per layer ``L.keys`` and ``L.values`` [1, heads, tokens, dim] (for a quantized KV cache
``L.keys.0`` .. ``L.keys.2``: packed values, scales and biases), and in the metadata the tokens (JSON), the cache
namespace, so that a restored prefix is reused only by requests of the same kind, and the KV cache type, so that a
file is restored only into a cache of the same type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlxd.engine.kv_types import QuantKV, TypedKV
from mlxd.engine.slots import Resident
from mlxd.errors import EngineError

FORMAT = "mlxd-slot-1"


class SlotFileError(EngineError):
    """A slot file that does not hold a cache this model can use (a restore turns it into b10621's refusal)."""


def _kind(cache: Any) -> str:
    """The cache type a layer is kept in: "model", a float dtype, or "qBITS/GROUP"."""
    if isinstance(cache, QuantKV):
        return f"q{cache.bits}/{cache.group_size}"
    if isinstance(cache, TypedKV):
        return str(cache.kv_dtype)
    return "model"


def save(resident: Resident | None, path: Path) -> int:
    """Write a slot's resident cache (None: an empty slot) to ``path``; returns the number of tokens written."""
    if resident is None:
        resident = Resident("raw", [], [])
    arrays: dict[str, mx.array] = {}
    kinds = set()
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
        else:
            arrays[f"{i}.keys"] = cache.keys[..., : cache.offset, :]
            arrays[f"{i}.values"] = cache.values[..., : cache.offset, :]
    metadata = {"format": FORMAT, "tokens": json.dumps(resident.tokens), "namespace": resident.namespace,
                "kv_type": ",".join(sorted(kinds)) or "model"}
    with open(path, "wb") as f:
        mx.save_safetensors(f, arrays, metadata)
    return len(resident.tokens)


def load(path: Path, like: list[Any]) -> Resident | None:
    """Read a slot file (None: it holds an empty slot); ``like`` is a fresh cache of the model to match."""
    try:
        # mlx's stub unions every mx.load form; safetensors with return_metadata gives (arrays, string metadata).
        arrays, metadata = cast(tuple[dict[str, mx.array], dict[str, str]],
                                mx.load(str(path), format="safetensors", return_metadata=True))
    except Exception as exc:
        raise SlotFileError(f"{path.name} is not a slot file: {exc}") from exc
    if metadata.get("format") != FORMAT:
        raise SlotFileError(f"{path.name} is not an mlxd slot file")
    tokens = [int(t) for t in json.loads(metadata.get("tokens", "[]"))]
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
            cache = TypedKV(fresh.kv_dtype) if isinstance(fresh, TypedKV) else KVCache()
            cache.keys, cache.values, cache.offset = k, v, k.shape[2]
            n_arrays += 2
        kv.append(cache)
    if len(arrays) != n_arrays:
        raise SlotFileError(f"{path.name} was saved from a model with another number of layers")
    return Resident(metadata.get("namespace", "raw"), tokens, kv)

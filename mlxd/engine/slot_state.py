"""A slot's resident tokens and keys/values as a file (``POST /slots/N?action=save|restore``).

The file is safetensors: per layer ``L.keys`` and ``L.values`` [1, heads, tokens, dim], and in the metadata the
tokens (JSON) and the cache namespace, so that a restored prefix is reused only by requests of the same kind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlxd.engine.slots import Resident
from mlxd.errors import EngineError

FORMAT = "mlxd-slot-1"


class SlotFileError(EngineError):
    """A slot file that does not hold a cache this model can use (a restore turns it into b10621's refusal)."""


def save(resident: Resident | None, path: Path) -> int:
    """Write a slot's resident cache (None: an empty slot) to ``path``; returns the number of tokens written."""
    if resident is None:
        resident = Resident("raw", [], [])
    arrays: dict[str, mx.array] = {}
    for i, cache in enumerate(resident.kv):
        if not isinstance(cache, KVCache):
            raise SlotFileError(f"a {type(cache).__name__} cannot be saved to a slot file")
        if cache.offset != len(resident.tokens):
            raise SlotFileError(f"layer {i} holds {cache.offset} tokens, the slot {len(resident.tokens)}")
        arrays[f"{i}.keys"] = cache.keys[..., : cache.offset, :]
        arrays[f"{i}.values"] = cache.values[..., : cache.offset, :]
    metadata = {"format": FORMAT, "tokens": json.dumps(resident.tokens), "namespace": resident.namespace}
    with open(path, "wb") as f:
        mx.save_safetensors(f, arrays, metadata)
    return len(resident.tokens)


def load(path: Path, like: list[Any]) -> Resident | None:
    """Read a slot file (None: it holds an empty slot); ``like`` is a fresh cache of the model to match."""
    try:
        arrays, metadata = mx.load(str(path), format="safetensors", return_metadata=True)
    except Exception as exc:
        raise SlotFileError(f"{path.name} is not a slot file: {exc}") from exc
    if metadata.get("format") != FORMAT:
        raise SlotFileError(f"{path.name} is not an mlxd slot file")
    tokens = [int(t) for t in json.loads(metadata.get("tokens", "[]"))]
    if not tokens:
        return None
    kv: list[Any] = []
    for i, fresh in enumerate(like):
        keys, values = arrays.get(f"{i}.keys"), arrays.get(f"{i}.values")
        if keys is None or values is None or not isinstance(fresh, KVCache) or keys.shape[2] != len(tokens):
            raise SlotFileError(f"{path.name} does not match this model's cache (layer {i})")
        cache = KVCache()
        cache.keys, cache.values, cache.offset = keys, values, keys.shape[2]
        kv.append(cache)
    if len(arrays) != 2 * len(like):
        raise SlotFileError(f"{path.name} was saved from a model with another number of layers")
    return Resident(metadata.get("namespace", "raw"), tokens, kv)

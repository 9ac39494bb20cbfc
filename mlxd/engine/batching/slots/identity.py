"""What wrote a slot file: the model's identity, architecture and slot context (issue 28, finding 4).

A slot file's keys and values are only meaningful to the weights that computed them: restored into another model,
even one with the same shapes, they silently change its output. llama.cpp checks the layer count and row sizes;
mlxd checks more, since an MLX checkpoint's shapes say little about its weights: a digest of the weights, sampled
(every parameter's name, shape, dtype and 64 of its values, first, last and spread between), so that two
checkpoints of one architecture with other weights differ, at a cost of one small read per parameter instead of
hashing gigabytes. An adapter's own arrays are parameters too, so a model with a LoRA adapter is another model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

if TYPE_CHECKING:
    from mlxd.engine.loading.loader import LoadedModel

SAMPLES = 64  # values read from each parameter


@dataclass(frozen=True)
class SlotOwner:
    """The model a slot belongs to: ``model`` a digest of its weights, ``arch`` its config's model_type,
    ``n_ctx`` the slot's context size."""

    model: str
    arch: str
    n_ctx: int


def weights_digest(model: Any) -> str:
    """A sha256 over every parameter's name, shape, dtype and a sample of its values (run on the model's worker
    thread: it evaluates the samples)."""
    flat_params: Any = tree_flatten(model.parameters())
    params = sorted(((str(name), array) for name, array in flat_params if isinstance(array, mx.array)),
                    key=lambda item: item[0])
    samples = []
    for _, array in params:
        flat = array.reshape(-1)
        n = int(flat.size)
        where = np.unique(np.linspace(0, max(n - 1, 0), num=min(SAMPLES, n), dtype=np.int64))
        samples.append(mx.take(flat, mx.array(where, dtype=mx.int64)).astype(mx.float32) if n
                       else mx.zeros((0,), dtype=mx.float32))
    mx.eval(samples)
    digest = hashlib.sha256()
    for (name, array), sample in zip(params, samples):
        digest.update(f"{name}|{tuple(array.shape)}|{array.dtype}|".encode())
        digest.update(np.asarray(sample).tobytes())
    return digest.hexdigest()


def owner_of(loaded: "LoadedModel", n_ctx: int) -> SlotOwner:
    """The SlotOwner of a loaded model (mlxd.engine.loading.loader.LoadedModel) serving slots of ``n_ctx`` tokens."""
    arch = str(loaded.config.get("model_type") or type(loaded.model).__name__)
    return SlotOwner(weights_digest(loaded.model), arch, int(n_ctx))

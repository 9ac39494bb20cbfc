"""The unfused LoRA layer: a base linear plus any number of low-rank adapters, each with a scale set at run time.

mlx-lm's ``LoRALinear`` holds one adapter with its scale fixed at construction, and serving it at another scale
means fusing it into the weights. Neither fits a server whose adapter scales change between requests, so this
layer keeps mlx-lm's parameterisation (``y = base(x) + scale * (x @ A) @ B`` with ``A`` [in, r] and ``B``
[r, out], computed in the input's dtype as mlx-lm does) but holds several adapters and reads their scales from a
shared board on every call.
"""

from __future__ import annotations

from typing import Iterable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten


class ScaleBoard:
    """The scales every adapted layer of one model computes with, one per adapter (adapter scale x its alpha).

    Only the model's worker thread replaces ``active``, and only between forward passes, so a batch is computed
    with one set of scales from its first layer to its last.
    """

    def __init__(self, n_adapters: int) -> None:
        self.active: tuple[float, ...] = (0.0,) * n_adapters


class _Wiring:
    """Which adapters a layer holds (ids on the board), kept out of the module's parameter tree."""

    def __init__(self, board: ScaleBoard) -> None:
        self.board = board
        self.ids: list[int] = []


class MultiLoRALinear(nn.Module):
    """``linear(x) + sum_i s_i * (x @ lora_a[i]) @ lora_b[i]``; an adapter whose scale is 0 costs nothing."""

    def __init__(self, linear: nn.Module, board: ScaleBoard) -> None:
        super().__init__()
        self.linear = linear
        self.lora_a: list[mx.array] = []
        self.lora_b: list[mx.array] = []
        self._wiring = _Wiring(board)

    @property
    def adapter_ids(self) -> tuple[int, ...]:
        return tuple(self._wiring.ids)

    def add(self, adapter_id: int, lora_a: mx.array, lora_b: mx.array) -> None:
        """Attach one adapter's pair of matrices (shapes checked by the caller against the base layer)."""
        self._wiring.ids.append(adapter_id)
        self.lora_a.append(lora_a)
        self.lora_b.append(lora_b)

    def __call__(self, x: mx.array) -> mx.array:
        y = self.linear(x)
        scales = self._wiring.board.active
        for k, adapter_id in enumerate(self._wiring.ids):
            s = scales[adapter_id]
            if s != 0.0:
                z = (x @ self.lora_a[k]) @ self.lora_b[k]
                y = y + (s * z).astype(x.dtype)
        return y


def linear_dims(module: nn.Module) -> tuple[int, int] | None:
    """(input, output) dimensions of a Linear or QuantizedLinear; None for any other module."""
    if isinstance(module, nn.QuantizedLinear):
        out_dims, packed = module.weight.shape
        return packed * 32 // module.bits, out_dims
    if isinstance(module, nn.Linear):
        out_dims, in_dims = module.weight.shape
        return in_dims, out_dims
    return None


def _lora_candidate(module: nn.Module) -> bool:
    """The module types mlx-lm's ``linear_to_lora_layers`` would convert when an adapter names no keys."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    kinds = (nn.Linear, nn.QuantizedLinear, SwitchLinear, QuantizedSwitchLinear, nn.Embedding, nn.QuantizedEmbedding)
    return hasattr(module, "to_lora") or isinstance(module, kinds)


def target_modules(model: nn.Module, num_layers: int, keys: Iterable[str] | None) -> dict[str, nn.Module]:
    """The modules mlx-lm converts for an adapter, by their full path (the names in ``adapters.safetensors``).

    Same selection as ``mlx_lm.tuner.utils.linear_to_lora_layers``: the last ``num_layers`` blocks (all of them
    for 0 or less), the ``keys`` paths inside each block (every linear-like module when absent), and any
    top-level module whose full path is one of the keys.
    """
    paths = {id(m): name for name, m in model.named_modules()}
    layers = list(model.layers)
    if keys is None:
        key_set: set[str] = set()
        for layer in layers:
            key_set.update(k for k, m in layer.named_modules() if _lora_candidate(m))
    else:
        key_set = set(keys)
    found: dict[str, nn.Module] = {}
    for layer in layers[-max(num_layers, 0):]:
        prefix = paths[id(layer)]
        for k, m in layer.named_modules():
            if k in key_set:
                found[f"{prefix}.{k}"] = m
    for k, m in model.named_modules():
        if k in key_set:
            found[k] = m
    return found


def install(model: nn.Module, path: str, base: nn.Module, board: ScaleBoard) -> MultiLoRALinear:
    """The adapted layer at ``path``: the one already there, or a new one put in place of ``base``."""
    if isinstance(base, MultiLoRALinear):
        return base
    layer = MultiLoRALinear(base, board)
    model.update_modules(tree_unflatten([(path, layer)]))
    return layer

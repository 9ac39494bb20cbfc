"""KV cache types (``-ctk`` / ``-ctv``): the checkpoint's dtype, another float dtype, or MLX's affine quantization.

b10621's quantized types (``q8_0``, ``q4_0``, ``q4_1``, ``q5_0``, ``q5_1``) store blocks of 32 values with a scale
(and, for ``_1``, a minimum). MLX's equivalent is ``mx.quantize``: an affine scale and bias per group, which
mlx-lm's ``QuantizedKVCache`` and its quantized attention use. The group is 64 values (mlx-lm's default) where the
head size allows it, else 32: a scale and a bias per 32 values cost 1 bit per value more than ggml's one scale,
which would leave q8_0 at 0.56x the memory of f16 instead of ggml's 0.53x; per 64 it is 0.53x. A head size that
32 does not divide is refused, as b10621 refuses it. ``iq4_nl`` is a non-linear codebook
with no MLX counterpart and is refused by the configuration layer. ``f16`` (b10621's default) left at its default
keeps the checkpoint's own dtype, as mlx-lm does; an explicit ``f16``, ``bf16`` or ``f32`` stores keys and values
in that dtype.

mlx-lm has no batched quantized cache (which is why ``mlx_lm.server`` turns batching off for ``--kv-bits``), so
:class:`BatchQuantizedKVCache` is written here: ``BatchKVCache``'s left-padded bookkeeping over the
(packed, scales, biases) triples that ``QuantizedKVCache`` keeps. Every cache class here keeps its kind through
``merge`` and ``extract``, so a row that joins or leaves the decode batch, the prompt cache and slot files all see
the same type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache, dynamic_roll, make_prompt_cache

from mlxd.engine.batching import readback
from mlxd.errors import EngineError

# ggml's block size for the q*_0 / q*_1 types (QK8_0 = QK4_0 = QK5_0 = 32); MLX's group size for them.
BLOCK = 32
QUANT_BITS = {"q8_0": 8, "q4_0": 4, "q4_1": 4, "q5_0": 5, "q5_1": 5}
FLOAT_DTYPES = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}


@dataclass(frozen=True)
class KvType:
    """How the KV cache stores keys and values."""

    name: str = "model"  # a b10621 type name, or "model": the checkpoint's own dtype
    bits: int | None = None  # quantized with MLX's affine quantization
    dtype: Any = None  # a float dtype, or None for the checkpoint's
    group_size: int = BLOCK  # values per scale and bias (see fit)

    def bytes_per_value(self, model_dtype: Any) -> float:
        """Storage per key or value element: packed bits plus a scale and a bias per group (in the model's dtype)."""
        if self.bits is not None:
            return self.bits / 8 + 2 * model_dtype.size / self.group_size
        return float((self.dtype or model_dtype).size)


CHECKPOINT = KvType()


def resolve(type_k: str, type_v: str, explicit: bool) -> KvType:
    """The cache type for ``-ctk`` / ``-ctv`` (``explicit``: either was given, else the checkpoint's dtype)."""
    if not explicit:
        return CHECKPOINT
    if type_k != type_v:
        raise EngineError(f"--cache-type-k {type_k} and --cache-type-v {type_v} differ: mlx-lm's quantized attention "
                          "takes one quantization for keys and values; give both the same type")
    if type_k in QUANT_BITS:
        return KvType(type_k, bits=QUANT_BITS[type_k])
    if type_k in FLOAT_DTYPES:
        return KvType(type_k, dtype=FLOAT_DTYPES[type_k])
    raise EngineError(f"unsupported cache type {type_k}: allowed values under MLX: "
                      f"{', '.join([*FLOAT_DTYPES, *QUANT_BITS])}")


def _text_args(model: Any) -> Any:
    """The text decoder's hyper-parameters: an mlx-lm model's ``args``; an mlx-vlm model keeps them on its
    language model (``args`` or ``config``) or in its config's ``text_config``."""
    language = getattr(model, "language_model", None)
    for args in (getattr(model, "args", None), getattr(language, "args", None), getattr(language, "config", None)):
        if args is not None:
            return args
    return getattr(getattr(model, "config", None), "text_config", None)


def _arg(args: Any, name: str) -> Any:
    """``args.name``, else the same key of its ``text_config`` (mlx-lm's wrappers of multimodal checkpoints nest
    the decoder's settings there)."""
    value = getattr(args, name, None)
    if value is None:
        nested = getattr(args, "text_config", None)
        value = nested.get(name) if isinstance(nested, dict) else getattr(nested, name, None)
    return value


def head_dims(model: Any) -> tuple[int, int, int, int]:
    """(layers with a KV cache, kv heads, key head size, value head size) of an mlx-lm model."""
    args = _text_args(model)
    heads = int(_arg(args, "num_key_value_heads") or _arg(args, "num_attention_heads") or 1)
    hd = _arg(args, "head_dim") or int(_arg(args, "hidden_size")) // int(_arg(args, "num_attention_heads"))
    n_kv = sum(1 for c in make_prompt_cache(model) if type(c) is KVCache)
    return n_kv, heads, int(hd), int(hd)


def fit(kv: KvType, model: Any) -> KvType:
    """``kv`` for this model's head size: a quantized type's group, or b10621's refusal when 32 does not divide it."""
    if kv.bits is None:
        return kv
    _, _, hk, hv = head_dims(model)
    for which, hd in (("K", hk), ("V", hv)):
        if hd % BLOCK:
            raise EngineError(f"{which} cache type {kv.name} with block size {BLOCK} does not divide "
                              f"n_embd_head_{which.lower()}={hd}")
    group = 2 * BLOCK if hk % (2 * BLOCK) == 0 and hv % (2 * BLOCK) == 0 else BLOCK
    return KvType(kv.name, bits=kv.bits, group_size=group)


def bytes_per_token(kv: KvType, model: Any, model_dtype: Any) -> int:
    """KV cache bytes one token takes across the model's layers."""
    n, heads, hk, hv = head_dims(model)
    return int(n * heads * (hk + hv) * kv.bytes_per_value(model_dtype))


def model_dtype(model: Any) -> Any:
    """The dtype the model computes keys and values in: its first floating-point parameter's."""
    from mlx.utils import tree_flatten

    # mlx's stub types tree_flatten's result as a list, a dict or a tuple; a flattened parameter tree is a list of
    # (dotted name, array) pairs.
    for _, p in cast(list[tuple[str, mx.array]], tree_flatten(model.parameters())):
        if mx.issubdtype(p.dtype, mx.floating):
            return p.dtype
    return mx.float32


def describe(kv: KvType, model: Any, n_ctx_slot: int) -> dict[str, Any]:
    """The KV cache's type and size, as ``/props`` reports it (``kv_cache``)."""
    dtype = model_dtype(model)
    per_token = bytes_per_token(kv, model, dtype)
    name = kv.name if kv is not CHECKPOINT else str(dtype).removeprefix("mlx.core.")
    return {"type_k": name, "type_v": name, "explicit": kv is not CHECKPOINT, "quantized": kv.bits is not None,
            "group_size": kv.group_size if kv.bits is not None else None, "bytes_per_token": per_token,
            "bytes_per_slot": per_token * n_ctx_slot}


def make_cache(model: Any, kv: KvType) -> list[Any]:
    """A fresh per-layer cache for one sequence; full-attention layers take the type, others stay as the model
    makes them (sliding-window and recurrent caches keep the checkpoint's dtype)."""
    caches = make_prompt_cache(model)
    if kv is CHECKPOINT or (kv.bits is None and kv.dtype is None):
        return caches
    out: list[Any] = []
    for c in caches:
        if type(c) is not KVCache:
            out.append(c)
        elif kv.bits is not None:
            out.append(QuantKV(group_size=kv.group_size, bits=kv.bits))
        else:
            out.append(TypedKV(kv.dtype))
    return out


def is_single(c: Any) -> bool:
    """A one-sequence full-attention cache that the batch can merge (plain, typed or quantized)."""
    return type(c) in (KVCache, TypedKV, QuantKV)


def is_batched(c: Any) -> bool:
    return type(c) in (BatchKVCache, TypedBatchKV, BatchQuantizedKVCache)


def empty_batch(like: Any, left_padding: list[int]) -> Any:
    """An empty batched cache of ``like``'s kind for prompts left-padded by ``left_padding``."""
    if isinstance(like, QuantKV):
        return BatchQuantizedKVCache(left_padding, like.group_size, like.bits)
    if isinstance(like, TypedKV):
        return TypedBatchKV(left_padding, like.kv_dtype)
    return BatchKVCache(left_padding)


# -- float dtype ---------------------------------------------------------------------------------------------------
class TypedKV(KVCache):
    """A ``KVCache`` that stores keys and values in ``dtype``."""

    def __init__(self, dtype: Any) -> None:
        super().__init__()
        self.kv_dtype = dtype

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> Any:
        return super().update_and_fetch(keys.astype(self.kv_dtype), values.astype(self.kv_dtype))

    def merge(self, caches: list[Any]) -> "TypedBatchKV":  # type: ignore[override]
        return TypedBatchKV.merge_typed(caches, self.kv_dtype)


class TypedBatchKV(BatchKVCache):
    """``BatchKVCache`` storing ``dtype``; rows extract to :class:`TypedKV`."""

    def __init__(self, left_padding: list[int], dtype: Any = mx.float16) -> None:
        super().__init__(left_padding)
        self.kv_dtype = dtype

    @classmethod
    def merge_typed(cls, caches: list[Any], dtype: Any) -> "TypedBatchKV":
        plain = BatchKVCache.merge(caches)
        out = cls([0] * len(caches), dtype)
        out.keys, out.values, out.offset, out.left_padding, out._idx = plain.state
        return out

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> Any:
        return super().update_and_fetch(keys.astype(self.kv_dtype), values.astype(self.kv_dtype))

    def extract(self, idx: int) -> TypedKV:
        plain = super().extract(idx)
        out = TypedKV(self.kv_dtype)
        out.keys, out.values, out.offset = plain.keys, plain.values, plain.offset
        return out


# -- quantized -----------------------------------------------------------------------------------------------------
class QuantKV(QuantizedKVCache):
    """mlx-lm's ``QuantizedKVCache`` that merges into :class:`BatchQuantizedKVCache` and can be trimmed in place."""

    # As in BatchQuantizedKVCache: mlx-lm's untyped __init__ leaves these inferred as ``None``.
    keys: tuple[mx.array, ...] | None  # type: ignore[assignment]
    values: tuple[mx.array, ...] | None  # type: ignore[assignment]

    def merge(self, caches: list[Any]) -> "BatchQuantizedKVCache":
        return BatchQuantizedKVCache.merge(caches)

    def size(self) -> int:
        return int(self.offset)


def _slice(t: tuple[mx.array, ...], *index: Any) -> tuple[mx.array, ...]:
    return tuple(x[index] for x in t)


class BatchQuantizedKVCache(BatchKVCache):
    """``BatchKVCache``'s left-padded rows over quantized (packed, scales, biases) triples."""

    # mlx-lm's untyped ``BatchKVCache.__init__`` leaves ``keys`` / ``values`` inferred as ``None``; here they hold
    # the (packed, scales, biases) triples.
    keys: tuple[mx.array, ...] | None  # type: ignore[assignment]
    values: tuple[mx.array, ...] | None  # type: ignore[assignment]

    def __init__(self, left_padding: list[int], group_size: int = BLOCK, bits: int = 8) -> None:
        super().__init__(left_padding)
        self.group_size, self.bits = group_size, bits

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> Any:
        prev, n = self._idx, keys.shape[2]
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        if self.keys is None or prev + n > self.keys[0].shape[2]:
            steps = (self.step + n - 1) // self.step * self.step

            def grow(x: mx.array | None, like: mx.array) -> mx.array:
                pad = mx.zeros((like.shape[0], like.shape[1], steps, like.shape[3]), like.dtype)
                return pad if x is None else mx.concatenate([x[..., :prev, :], pad], axis=2)

            self.keys = tuple(grow(None if self.keys is None else a, b) for a, b in zip(self.keys or (None,) * 3, qk))
            self.values = tuple(grow(None if self.values is None else a, b)
                                for a, b in zip(self.values or (None,) * 3, qv))
        assert self.keys is not None and self.values is not None
        self.offset = self.offset + n
        self._idx += n
        for dst, src in ((self.keys, qk), (self.values, qv)):
            for d, s in zip(dst, src):
                d[..., prev : self._idx, :] = s
        return self.keys_and_values()

    def keys_and_values(self) -> Any:
        assert self.keys is not None and self.values is not None
        return _slice(self.keys, Ellipsis, slice(None, self._idx), slice(None)), _slice(
            self.values, Ellipsis, slice(None, self._idx), slice(None))

    def finalize(self) -> None:
        if self._right_padding is not None:
            assert self.keys is not None and self.values is not None  # a prepared prompt was written first
            pad = self._right_padding[:, None]
            self.keys = tuple(dynamic_roll(x, pad, axis=2) for x in self.keys)
            self.values = tuple(dynamic_roll(x, pad, axis=2) for x in self.values)
            self.offset = self.offset - self._right_padding
            self.left_padding += self._right_padding
            self._right_padding = None

    def filter(self, batch_indices: Any) -> None:
        if self.keys is not None and self.values is not None:
            self.keys = _slice(self.keys, batch_indices)
            self.values = _slice(self.values, batch_indices)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        low = min(readback.ints(self.left_padding))
        if low > 0:
            if self.keys is not None and self.values is not None:
                self.keys = _slice(self.keys, Ellipsis, slice(low, None), slice(None))
                self.values = _slice(self.values, Ellipsis, slice(low, None), slice(None))
            self._idx -= low
            self.left_padding -= low

    def extend(self, other: "BatchQuantizedKVCache") -> None:
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        idx = max(self._idx, other._idx)
        size = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)
        ref = (self if self.keys is not None else other)
        assert ref.keys is not None and ref.values is not None
        ref_keys, ref_values = ref.keys, ref.values

        def pad(c: "BatchQuantizedKVCache") -> tuple[Any, Any, mx.array, mx.array]:
            rows = c.offset.shape[0]
            left = idx - c._idx

            def one(x: mx.array | None, like: mx.array) -> mx.array:
                if x is None:
                    x = mx.zeros((rows, like.shape[1], 0, like.shape[3]), like.dtype)
                right = size - x.shape[2] - left
                if right < 0:
                    x, right = x[..., :right, :], 0
                return mx.pad(x, [(0, 0), (0, 0), (left, right), (0, 0)]) if left or right else x

            ks = tuple(one(None if c.keys is None else x, r) for x, r in zip(c.keys or (None,) * 3, ref_keys))
            vs = tuple(one(None if c.values is None else x, r) for x, r in zip(c.values or (None,) * 3, ref_values))
            return ks, vs, c.offset, c.left_padding + left

        a, b = pad(self), pad(other)
        self.keys = tuple(mx.concatenate([x, y]) for x, y in zip(a[0], b[0]))
        self.values = tuple(mx.concatenate([x, y]) for x, y in zip(a[1], b[1]))
        self.offset = mx.concatenate([a[2], b[2]])
        self.left_padding = mx.concatenate([a[3], b[3]])
        self._idx = idx

    def extract(self, idx: int) -> QuantKV:
        out = QuantKV(group_size=self.group_size, bits=self.bits)
        padding = readback.ints(self.left_padding)[idx]
        assert self.keys is not None and self.values is not None
        out.keys = tuple(mx.contiguous(x[idx : idx + 1, :, padding : self._idx]) for x in self.keys)
        out.values = tuple(mx.contiguous(x[idx : idx + 1, :, padding : self._idx]) for x in self.values)
        out.offset = out.keys[0].shape[2]
        return out

    @classmethod
    def merge(cls, caches: list[Any]) -> "BatchQuantizedKVCache":
        lengths = [int(c.offset) for c in caches]
        longest = max(lengths)
        bits = next((c.bits for c in caches), 8)
        group = next((c.group_size for c in caches), BLOCK)
        if longest == 0:
            return cls([0] * len(caches), group, bits)
        padding = [longest - n for n in lengths]
        ref = next(c for c in caches if c.keys is not None and c.offset)

        def stack(part: str) -> tuple[mx.array, ...]:
            out = []
            for j, like in enumerate(getattr(ref, part)):
                rows = []
                for p, c, n in zip(padding, caches, lengths):
                    x = getattr(c, part)[j][..., :n, :] if n else mx.zeros((1, *like.shape[1:2], 0, like.shape[3]),
                                                                           like.dtype)
                    rows.append(mx.pad(x, [(0, 0), (0, 0), (p, 0), (0, 0)]) if p else x)
                out.append(mx.concatenate(rows))
            return tuple(out)

        cache = cls(padding, group, bits)
        cache.keys, cache.values = stack("keys"), stack("values")
        cache.offset = cache.offset + longest
        cache._idx = longest
        return cache

    def size(self) -> int:
        return self._idx

    @property
    def nbytes(self) -> int:
        if self.keys is None or self.values is None:
            return 0
        return sum(x.nbytes for x in (*self.keys, *self.values))

    @property
    def state(self) -> Any:
        return self.keys, self.values, self.offset, self.left_padding, self._idx

    @state.setter
    def state(self, v: Any) -> None:
        self.keys, self.values, self.offset, self.left_padding, self._idx = v

"""One prompt-cache entry as a file of the disk tier (``--cache-disk``): what is written, and how it is read back.

Layout: ``MAGIC``, the header's length (8 bytes, little endian), the header (JSON: what produced the keys and
values, the tokens, and each array's dtype, shape and place), the arrays' bytes, and a checksum of everything before
it: XXH3-64 (8 bytes) in format 2, CRC-32 (4 bytes) in format 1, which is still read. A file whose magic,
length, header or checksum does not hold is refused as a whole: nothing of it becomes a cache. A checksum and not a
cryptographic hash: it guards against torn and flipped bytes, not an adversary who can write the cache directory;
both are computed without holding the GIL (prompt_cache.checksum).

Work is split by thread: :func:`encode` runs on the model's worker thread (the arrays belong to its stream; it
evaluates them and copies them into host buffers), :func:`write` on the tier's writer thread (plain bytes only),
:func:`load` on the worker thread again (its checksum on the checksum threads meanwhile).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import numpy as np
import xxhash
from mlx_lm.models.cache import KVCache

from mlxd.engine.batching.prompt_cache import checksum
from mlxd.engine.loading.kv_types import QuantKV, TypedKV

# Version 2 (written): an XXH3-64 trailer. Version 1 (still read, so that entries survive the upgrade's restart): a
# CRC-32 trailer. Both are checksums against torn and flipped bytes, not against an adversary who can write the
# cache directory; XXH3 runs at 4 to 10 GB/s where zlib's CRC-32 runs at 0.5 to 0.7 (docs/benchmarks.md, section
# 10), and the checksum was the longest part of a read.
MAGIC = b"MLXDKV2\n"
MAGIC_V1 = b"MLXDKV1\n"
_LEN = struct.Struct("<Q")
_TRAILER = {MAGIC: struct.Struct("<Q"), MAGIC_V1: struct.Struct("<I")}
# Arrays travel as unsigned integers of their item size (numpy has no bfloat16), their dtype in the header.
_MX_UINT: dict[int, mx.Dtype] = {1: mx.uint8, 2: mx.uint16, 4: mx.uint32, 8: mx.uint64}
_NP_UINT: dict[int, np.dtype[Any]] = {n: np.dtype(f"<u{n}") for n in (1, 2, 4, 8)}
_DTYPES = {str(d): d for d in (mx.float32, mx.float16, mx.bfloat16, mx.uint32, mx.uint8, mx.int8, mx.uint16)}


class EntryError(ValueError):
    """A file that is not a whole, intact entry of this format (truncated, corrupt or foreign)."""


@dataclass(frozen=True)
class Meta:
    """What an entry's header says: whose keys and values they are and for which tokens."""

    identity: str  # the model and KV-relevant configuration (prompt_disk.identity)
    namespace: str  # the request kind, LoRA scales and media (the RAM cache's namespace)
    tokens: tuple[int, ...]
    layers: tuple[str, ...]  # each layer's cache kind (layer_kind)

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "namespace": self.namespace, "tokens": list(self.tokens),
                "layers": list(self.layers)}

    @staticmethod
    def of(header: dict[str, Any]) -> "Meta":
        try:
            return Meta(str(header["identity"]), str(header["namespace"]),
                        tuple(int(t) for t in header["tokens"]), tuple(str(k) for k in header["layers"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise EntryError(f"incomplete header: {exc}") from exc


@dataclass
class Blob:
    """An entry in host memory, ready for the writer thread: the header and the arrays' bytes."""

    meta: Meta
    header: bytes
    buffers: list[np.ndarray]

    @property
    def nbytes(self) -> int:
        return len(MAGIC) + _LEN.size + len(self.header) + sum(b.nbytes for b in self.buffers) + _TRAILER[MAGIC].size


def layer_kind(cache: Any) -> str | None:
    """A layer cache's kind as written ("model", "typed:DTYPE", "qBITS/GROUP"); None for kinds not written
    (sliding-window, recurrent and batched caches: they cannot be trimmed to a prefix)."""
    if type(cache) is QuantKV:
        return f"q{cache.bits}/{cache.group_size}"
    if type(cache) is TypedKV:
        return f"typed:{cache.kv_dtype}"
    if type(cache) is KVCache:
        return "model"
    return None


def kinds(kv: list[Any]) -> tuple[str, ...] | None:
    out = [layer_kind(c) for c in kv]
    return None if any(k is None for k in out) else tuple(k for k in out if k is not None)


def encode(identity: str, namespace: str, tokens: list[int], kv: list[Any]) -> Blob | None:
    """The entry of ``kv`` (worker thread); None when a layer's kind is not written or its length disagrees."""
    layer_kinds = kinds(kv)
    if layer_kinds is None or not tokens:
        return None
    arrays: list[mx.array] = []
    for cache in kv:
        if cache.offset != len(tokens) or cache.keys is None:
            return None
        if type(cache) is QuantKV:
            parts = [*cast(tuple[mx.array, ...], cache.keys), *cast(tuple[mx.array, ...], cache.values)]
            arrays.extend(part[..., : cache.offset, :] for part in parts)
        else:
            arrays.extend((cache.keys[..., : cache.offset, :], cache.values[..., : cache.offset, :]))
    mx.eval(arrays)
    described, buffers, offset = [], [], 0
    for a in arrays:
        host = np.ascontiguousarray(np.array(a.view(_MX_UINT[a.dtype.size])), dtype=_NP_UINT[a.dtype.size])  # a copy: MLX may reuse the buffer
        described.append({"dtype": str(a.dtype), "shape": list(a.shape), "offset": offset, "nbytes": host.nbytes})
        buffers.append(host)
        offset += host.nbytes
    meta = Meta(identity, namespace, tuple(int(t) for t in tokens), layer_kinds)
    header = json.dumps({**meta.to_json(), "arrays": described, "payload": offset}, separators=(",", ":")).encode()
    return Blob(meta, header, buffers)


def write(blob: Blob, path: Path) -> int:
    """Write ``blob`` to ``path`` whole or not at all (a temporary file, fsync, rename); returns the bytes written.

    Writer thread. An ``OSError`` (disk full, read-only) leaves no file behind and reaches the caller."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            digest = xxhash.xxh3_64()
            parts: list[bytes | memoryview] = [MAGIC, _LEN.pack(len(blob.header)), blob.header]
            parts.extend(b.data.cast("B") for b in blob.buffers)
            for view in parts:
                f.write(view)
                digest.update(view)
            f.write(_TRAILER[MAGIC].pack(digest.intdigest()))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return blob.nbytes


def read_header(path: Path) -> tuple[Meta, int]:
    """An entry's header and its file size without reading its arrays (to rebuild the index); raises EntryError."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC) + _LEN.size)
            trailer = _TRAILER.get(head[: len(MAGIC)])
            if trailer is None or len(head) < len(MAGIC) + _LEN.size:
                raise EntryError("not an mlxd prompt-cache entry")
            (n,) = _LEN.unpack(head[len(MAGIC):])
            size = os.fstat(f.fileno()).st_size
            if n > size:
                raise EntryError("truncated header")
            header = json.loads(f.read(n))
    except (OSError, ValueError) as exc:
        raise EntryError(str(exc)) from exc
    if size != len(MAGIC) + _LEN.size + n + int(header.get("payload", -1)) + trailer.size:
        raise EntryError(f"truncated: {size} bytes")
    return Meta.of(header), size


def load(path: Path, like: list[Any]) -> tuple[Meta, list[Any]]:
    """An entry's header and per-layer caches (worker thread), its checksum verified; ``like`` is a fresh cache of
    the model, whose layer kinds the entry must have. Raises EntryError.

    The file is mapped, not read into a buffer: the arrays' bytes are copied once, from the page cache into MLX, and
    the checksum is computed over the mapping in slices on the checksum threads (prompt_cache.checksum; zlib lets go
    of the GIL) while the arrays are built. No array is handed on before the checksum holds: a mismatch throws them
    away. The size is checked before anything is touched, and the files of the tier are never changed in place
    (written whole and renamed, or unlinked, which leaves a mapping valid)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = len(MAGIC) + _LEN.size
            if size < start + _TRAILER[MAGIC_V1].size:
                raise EntryError("not an mlxd prompt-cache entry")
            # Populated at once: one pass over the page cache rather than a fault per page while copying.
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mapped = mmap.mmap(f.fileno(), size, flags=flags, prot=mmap.PROT_READ)
    except (OSError, ValueError) as exc:
        raise EntryError(str(exc)) from exc
    data = memoryview(mapped)
    trailer = _TRAILER.get(bytes(data[: len(MAGIC)]))
    if trailer is None or size < start + trailer.size:
        raise EntryError("not an mlxd prompt-cache entry")
    (n,) = _LEN.unpack_from(data, len(MAGIC))
    try:
        header = json.loads(bytes(data[start: start + n]))
        payload = int(header.get("payload", -1))
    except (ValueError, AttributeError, TypeError) as exc:
        raise EntryError(f"bad header: {exc}") from exc
    if size != start + n + payload + trailer.size:
        raise EntryError("wrong length")
    body = data[: -trailer.size]
    computed = checksum.start_xxh3(body) if trailer is _TRAILER[MAGIC] else checksum.start(body)
    try:
        meta = Meta.of(header)
        kv = decode(meta, header, data[start + n: -trailer.size], like)
    finally:
        value = computed()  # waited for either way: its threads read the mapping
    if value != trailer.unpack_from(data, size - trailer.size)[0]:
        raise EntryError("checksum mismatch")
    return meta, kv


def decode(meta: Meta, header: dict[str, Any], payload: memoryview, like: list[Any]) -> list[Any]:
    """The per-layer caches of an entry's arrays (``payload``: their bytes, as :func:`load` maps them); ``like`` is a
    fresh cache of the model, whose layer kinds the entry must have. Raises EntryError."""
    if kinds(like) != meta.layers:
        raise EntryError("written for other cache layers")
    arrays = []
    for d in header["arrays"]:
        dtype = _DTYPES.get(str(d["dtype"]))
        if dtype is None:
            raise EntryError(f"unknown dtype {d['dtype']}")
        np_uint = _NP_UINT[dtype.size]
        host = np.frombuffer(payload, dtype=np_uint, count=int(d["nbytes"]) // np_uint.itemsize,
                             offset=int(d["offset"])).reshape(d["shape"])
        arrays.append(mx.array(host).view(dtype))
    n = len(meta.tokens)
    out: list[Any] = []
    it = iter(arrays)
    try:
        for fresh in like:
            if type(fresh) is QuantKV:
                cache: Any = QuantKV(group_size=fresh.group_size, bits=fresh.bits)
                parts = [next(it) for _ in range(6)]
                cache.keys, cache.values = tuple(parts[:3]), tuple(parts[3:])
            else:
                cache = TypedKV(fresh.kv_dtype) if type(fresh) is TypedKV else KVCache()
                cache.keys, cache.values = next(it), next(it)
            if cache.keys[0].shape[2] != n if isinstance(cache.keys, tuple) else cache.keys.shape[2] != n:
                raise EntryError("array length differs from the tokens")
            cache.offset = n
            out.append(cache)
    except StopIteration as exc:
        raise EntryError("fewer arrays than layers") from exc
    if next(it, None) is not None:
        raise EntryError("more arrays than layers")
    return out

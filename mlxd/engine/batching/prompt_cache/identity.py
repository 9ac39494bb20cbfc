"""What produced a KV cache, as one digest: the disk tier offers an entry only to a worker with the same one.

It covers the weights, the model's effective configuration (config.json with the RoPE overrides merged by the
loader), the KV cache type of every layer, and the LoRA adapters attached (their files; their scales are part of
each request's cache namespace, as is the digest of its images and audio).

The weights are named by cheap facts, not their bytes: each ``*.safetensors`` file's name, size and modification
time and its safetensors header (dtypes, shapes and offsets of every tensor), plus ``config.json`` and the index
file. Hashing gigabytes of weights at each load would cost seconds to minutes; a rewrite of a weights file changes
its modification time, so a stale entry is not reused. The price is a cache miss after a mere copy or ``touch`` of
the same weights, which costs one prefill.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_HEADER_MAX = 64 << 20  # a safetensors header larger than this is not read (the size and time still count)


def _files(h: Any, directory: Path) -> None:
    try:
        names = sorted(p for p in directory.iterdir() if p.is_file())
    except OSError:
        h.update(f"missing:{directory}".encode())
        return
    for p in names:
        if p.suffix == ".safetensors" or p.name in ("config.json", "model.safetensors.index.json",
                                                    "adapter_config.json"):
            st = p.stat()
            h.update(f"{p.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            if p.suffix == ".safetensors":
                h.update(_safetensors_header(p))
            else:
                h.update(p.read_bytes())


def _safetensors_header(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return b""
            (n,) = struct.unpack("<Q", raw)
            return f.read(n) if n <= _HEADER_MAX else b""
    except OSError:
        return b""


def identity(model_dir: Path, config: dict[str, Any], layer_kinds: Iterable[str],
             adapters: Iterable[Path] = ()) -> str:
    """The digest of a worker's model, configuration, KV layer kinds and adapters (hex, 32 characters)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(b"mlxd-kv-identity-1\0")
    _files(h, Path(model_dir))
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    h.update(("|".join(layer_kinds)).encode())
    for a in adapters:
        h.update(b"\0adapter\0")
        _files(h, Path(a))
    return h.hexdigest()

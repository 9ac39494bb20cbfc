"""The disk tier's read of one entry, in process: map, checksum, copy into MLX (prompt_cache.disk_format.load).

    .venv/bin/python bench/bench_disk_read.py [--tokens 8192] [--layers 12] [--kv-heads 4] [--head-dim 64] [--rounds 7]

Writes one entry of a float32 cache of the given shape (``small`` by default: 24 KiB a token, 192 MiB at 8192
tokens), then reads it back ``--rounds`` times each way, interleaved: format 1 with its CRC-32 in one piece (one
thread beside the copy, as before), format 1 with the CRC-32 in slices on the checksum threads, and format 2 with
its XXH3-64 (prompt_cache.checksum). Prints the median and the spread.
The file stays in the page cache, as a restarted daemon's recent entries do; not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import struct
import time
import zlib
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import KVCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxd.engine.batching.prompt_cache import checksum, disk_format  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    kv = []
    for _ in range(args.layers):
        cache = KVCache()
        shape = (1, args.kv_heads, args.tokens, args.head_dim)
        cache.update_and_fetch(mx.random.normal(shape), mx.random.normal(shape))
        kv.append(cache)
    blob = disk_format.encode("bench", "completion", list(range(args.tokens)), kv)
    assert blob is not None
    like = [KVCache() for _ in range(args.layers)]
    whole_slice = 1 << 40
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-read-") as tmp:
        path = Path(tmp) / "entry.kv"
        size = disk_format.write(blob, path)
        # The same entry in format 1: its magic, and a CRC-32 trailer in place of the XXH3-64 one.
        data = path.read_bytes()
        old = disk_format.MAGIC_V1 + data[len(disk_format.MAGIC): -8]
        v1 = Path(tmp) / "entry-v1.kv"
        v1.write_bytes(old + struct.pack("<I", zlib.crc32(old)))
        ways = (("format 1, CRC-32 in one piece", v1, whole_slice), ("format 1, CRC-32 in slices", v1, 16 << 20),
                ("format 2, XXH3-64", path, 16 << 20))
        times: dict[str, list[float]] = {name: [] for name, _, _ in ways}
        for _ in range(args.rounds):
            for name, file, slice_bytes in ways:
                checksum.SLICE, checksum._shift = slice_bytes, None
                t0 = time.perf_counter()
                _, got = disk_format.load(file, like)
                mx.eval([c.keys for c in got] + [c.values for c in got])
                times[name].append(time.perf_counter() - t0)
    print(f"entry {size / 2**20:.0f} MiB, {args.rounds} rounds each, interleaved")
    for way, ts in times.items():
        print(f"  {way}: median {statistics.median(ts) * 1e3:.0f} ms, min {min(ts) * 1e3:.0f}, "
              f"max {max(ts) * 1e3:.0f}")


if __name__ == "__main__":
    main()

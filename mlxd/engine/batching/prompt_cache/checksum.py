"""The checksum of a disk entry's read path (disk_format.load), on threads beside the copy into MLX: XXH3-64 for
entries of format 2, CRC-32 for those of format 1 (written before the upgrade).

A single zlib.crc32 runs at about 0.5 GB/s on the 2-vCPU machine of docs/benchmarks.md: 0.38 s for the 192 MiB entry
of an 8k-token prompt of ``small``, longer than copying the arrays into MLX, and so the part of the read that
separated a restored entry from warm RAM. zlib lets go of the GIL, so slices run at once on as many cores as there
are (and beside the copy); CRC-32 is linear, so the slices' values combine into the whole's without reading a byte
again (zlib's crc32_combine, whose operator for a slice's length is computed once per process here). Even so, on a
busy 2-vCPU machine the CRC-32 stayed the longest part; format 2 writes XXH3-64, 5 to 8 times faster on one core.
"""

from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import xxhash

SLICE = 16 << 20
_POLY = 0xEDB88320

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_shift: list[int] | None = None  # the operator that appends SLICE zero bytes to a CRC


def _times(matrix: list[int], vector: int) -> int:
    out, i = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[i]
        vector >>= 1
        i += 1
    return out


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, row) for row in matrix]


def zeros_operator(length: int) -> list[int]:
    """The GF(2) matrix that takes crc32(A) to crc32 of A followed by ``length`` zero bytes, less the final
    inversion's share (what zlib's crc32_combine applies to its first CRC)."""
    one_bit = [_POLY] + [1 << n for n in range(31)]
    op = _square(_square(_square(one_bit)))  # one zero byte: eight zero bits
    result: list[int] | None = None
    while length:
        if length & 1:
            result = op if result is None else [_times(op, row) for row in result]
        length >>= 1
        if length:
            op = _square(op)
    return result if result is not None else [1 << n for n in range(32)]


def combine(crc1: int, crc2: int, operator: list[int]) -> int:
    """crc32(A + B) from crc32(A), crc32(B) and the zeros operator of len(B)."""
    return _times(operator, crc1) ^ crc2


def _resources() -> tuple[ThreadPoolExecutor, list[int]]:
    global _pool, _shift
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)),
                                       thread_name_prefix="mlxd-cache-crc")
        if _shift is None:
            _shift = zeros_operator(SLICE)
        return _pool, _shift


def start(data: memoryview) -> Callable[[], int]:
    """Begin the CRC-32 of ``data`` on the checksum threads; the returned function waits for it and gives it.
    The first slice takes the remainder, so that every later one is SLICE long and shares one operator."""
    pool, shift = _resources()
    n = len(data)
    first = n % SLICE or min(n, SLICE)
    futures: list[Future[int]] = [pool.submit(zlib.crc32, data[:first])]
    futures += [pool.submit(zlib.crc32, data[at:at + SLICE]) for at in range(first, n, SLICE)]

    def result() -> int:
        crc = futures[0].result()
        for future in futures[1:]:
            crc = combine(crc, future.result(), shift)
        return crc

    return result


def start_xxh3(data: memoryview) -> Callable[[], int]:
    """Begin the XXH3-64 of ``data`` on a checksum thread (xxhash lets go of the GIL); the returned function waits
    for it and gives it."""
    pool, _ = _resources()
    future: Future[int] = pool.submit(xxhash.xxh3_64_intdigest, data)
    return future.result

"""The disk tier's CRC-32 in slices on threads (engine.batching.prompt_cache.checksum) equals zlib's over the whole."""

from __future__ import annotations

import random
import zlib

import pytest

from mlxd.engine.batching.prompt_cache import checksum


@pytest.mark.parametrize("size", [0, 1, 1000, checksum.SLICE - 1, checksum.SLICE, checksum.SLICE + 1,
                                  3 * checksum.SLICE + 12345])
def test_sliced_crc_equals_the_whole(size: int) -> None:
    data = random.Random(size).randbytes(size)
    assert checksum.start(memoryview(data))() == zlib.crc32(data)


def test_combine_of_any_split_is_the_whole() -> None:
    data = random.Random(7).randbytes(5000)
    for cut in (0, 1, 17, 2500, 4999, 5000):
        operator = checksum.zeros_operator(len(data) - cut)
        assert checksum.combine(zlib.crc32(data[:cut]), zlib.crc32(data[cut:]), operator) == zlib.crc32(data)


def test_a_flipped_byte_in_any_slice_changes_it() -> None:
    data = bytearray(random.Random(3).randbytes(2 * checksum.SLICE + 99))
    whole = zlib.crc32(data)
    for at in (0, checksum.SLICE + 5, len(data) - 1):
        data[at] ^= 0x10
        assert checksum.start(memoryview(data))() != whole
        data[at] ^= 0x10

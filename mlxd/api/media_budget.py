"""What decoding media may cost (issue 28, finding 3): per request and across the daemon.

An image's encoded size says nothing of its decoded size: a 196 KB all-zero PNG declares 8192 x 8192 pixels and
took 989 MB to decode and process (about 15 bytes a pixel: RGB, then the processor's float32 copy), and 32 of them
in one 6 MB request peaked at 9 GB. So every image's pixels are counted from its header before any is decoded
(mlxd.api.media.image_pixels), and:

- one request's media may hold at most MAX_REQUEST_PIXELS decoded pixels and MAX_REQUEST_BYTES encoded bytes
  (400 when it asks for more: it could never be served);
- the daemon decodes at most PIXELS_IN_FLIGHT pixels at once, across requests (about 1 GB at 15 bytes a pixel); a
  request that does not fit waits for room up to WAIT_S seconds, then gets 503 with Retry-After.

The budget is held from decoding until the model's processor has made its inputs, when the decoded images are
freed. Every method runs on the event loop, so the count needs no lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mlxd.errors import InvalidRequest, Unavailable

MAX_REQUEST_PIXELS = 8192 * 8192
MAX_REQUEST_BYTES = 64 * 2**20
PIXELS_IN_FLIGHT = 8192 * 8192
WAIT_S = 10.0
POLL_S = 0.02


class MediaBusy(Unavailable):
    """Media decoding across the daemon is at its budget: retry shortly."""

    retry_after = 1


def check_request(pixels: int, n_bytes: int) -> None:
    """Refuse a request whose media could never be decoded within one request's budget."""
    if pixels > MAX_REQUEST_PIXELS:
        raise InvalidRequest(f"images too large in total: {pixels} pixels (at most {MAX_REQUEST_PIXELS} per "
                             "request)")
    if n_bytes > MAX_REQUEST_BYTES:
        raise InvalidRequest(f"media too large in total: {n_bytes} bytes (at most {MAX_REQUEST_BYTES} per request)")


class PixelBudget:
    """Decoded pixels in flight across the daemon."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    @asynccontextmanager
    async def held(self, pixels: int, wait_s: float = WAIT_S) -> AsyncIterator[None]:
        """Hold ``pixels`` of the budget for the block, waiting up to ``wait_s`` for room (503 past it)."""
        pixels = min(pixels, self.total)  # a request's own cap bounds it; never wait for more than exists
        deadline = time.monotonic() + wait_s
        while pixels and self.used + pixels > self.total:
            if time.monotonic() >= deadline:
                raise MediaBusy("media decoding is at its memory budget; retry shortly")
            await asyncio.sleep(POLL_S)
        self.used += pixels
        try:
            yield
        finally:
            self.used -= pixels


BUDGET = PixelBudget(PIXELS_IN_FLIGHT)

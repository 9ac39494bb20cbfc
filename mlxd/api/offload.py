"""Model-sized work off the event loop: tokenizing, detokenizing, template rendering and JSON of large bodies run
on a small bounded pool of threads, so one 10 MB request never stalls ``/health`` or the other streams.

Small inputs (under ``INLINE_BYTES``) run inline: a thread hop costs more than tokenizing a chat turn. After a large
body, the process hands freed memory back to the system (``release_memory``), since glibc keeps what a burst of
large allocations grew its heap to. The process's heap is set up here too: one malloc arena (``share_one_heap``),
and the serving stack's own objects kept out of the cyclic collector's full passes (``freeze_startup_objects``).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from mlxd import heap

log = logging.getLogger("mlxd.api")

T = TypeVar("T")

INLINE_BYTES = 64 * 1024
# A body this large is followed by a memory release once its request ends.
LARGE_BYTES = 1024 * 1024
WORKERS = max(2, min(4, os.cpu_count() or 2))
RELEASE_DELAY_S = 0.5

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def pool() -> ThreadPoolExecutor:
    """The process's pool (made on first use; its threads are daemons and need no shutdown)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mlxd-offload")
        return _pool


async def run(fn: Callable[..., T], /, *args: Any, size: int | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the pool; inline when ``size`` (the input's bytes) is known to be small."""
    if size is not None and size < INLINE_BYTES:
        return fn(*args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool(), functools.partial(fn, *args, **kwargs))


_M_ARENA_MAX = -8  # glibc's mallopt parameter


def share_one_heap() -> None:
    """Make every thread allocate from glibc's main heap (``mallopt(M_ARENA_MAX, 1)``; Linux; before threads start).

    glibc gives threads that allocate at once arenas of their own, and the pages a large request freed in a pool
    thread's arena stayed resident through ``malloc_trim``: after a few 10 MB prompts the daemon held 225 MiB
    against a 118 MiB baseline, with the main heap alone it goes back to about its baseline. Small allocations
    stay per thread (glibc's tcache), and Python's own objects never reach malloc's locks (pymalloc)."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(_M_ARENA_MAX, 1)


def freeze_startup_objects() -> int:
    """Keep the objects alive now out of the cyclic collector's full passes (``gc.freeze``); call it once the
    serving stack is imported and before any model loads. Returns how many were frozen.

    Importing sanic, pydantic, mlx-lm and transformers leaves about 100,000 objects that the collector tracks, and a
    full collection walks every one of them with the GIL held: 45 to 80 ms during which no stream advances (on
    tiny-llama at 32 streams one came every 30,000 tokens or so, and ``_release`` runs one after every large
    request). Those objects live as long as the process does. Models, requests and whatever comes later stay
    collectable, so the cycles of an unloaded model are still freed."""
    gc.collect()  # what startup already dropped is not kept forever
    gc.freeze()
    return gc.get_freeze_count()


_release_pending = False


def _release() -> None:
    global _release_pending
    _release_pending = False
    gc.collect()  # large token lists sit in reference cycles of request objects until a collection
    heap.trim()


def release_memory_soon() -> None:
    """After a large request: collect and trim on the pool shortly, at most one release pending at a time."""
    global _release_pending
    if _release_pending:
        return
    _release_pending = True
    loop = asyncio.get_running_loop()
    loop.call_later(RELEASE_DELAY_S, lambda: loop.run_in_executor(pool(), _release))

"""glibc's ``malloc_trim(0)``: gives free heap pages back to the system (Linux; absent elsewhere, where it does
nothing). A leaf: the api's offload pool and the engine's release after an unload both trim."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Callable


def _malloc_trim() -> Callable[[], None] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0) and None


_trim = _malloc_trim()


def trim() -> None:
    """Hand the C heap's free pages back (blocking for as long as the heap is large: call it on a thread)."""
    if _trim is not None:
        _trim()

"""OpenBLAS's thread count chosen by the work of each forward pass, when the operator left ``--threads`` unset.

A prompt pass multiplies hundreds of rows by each weight matrix: compute-bound work that OpenBLAS's threads share
well. A decode step of a few sequences multiplies a few rows: it is bound by reading the weights, one more thread
adds little, and OpenBLAS 0.3.33 splits even a one-row product between its threads, so that on a machine with more
runnable threads than CPUs (a serving daemon's event loop and its clients, other processes) the step waits for a
helper thread that is not running: with two threads a 180M-parameter model decoded 5 to 10 times slower than with
one (docs/benchmarks.md, section 9). So a decode step of at most ``FEW_ROWS`` rows runs on one thread, and every
other pass on OpenBLAS's own count (one per CPU, or OPENBLAS_NUM_THREADS).

The count is OpenBLAS's process-wide setting (``openblas_set_num_threads``), read as each product starts; mlx's
products all run on the MLX stream thread of the one model worker that drives them, which sets the count before
it builds a pass. A worker's pipelined step may still be computing when the next pass's count is set: the switch
then applies a pass late, which costs nothing but that pass's speed. This module must not import mlx.
"""

from __future__ import annotations

import ctypes
import threading

# The most rows a decode step may have and still run on one OpenBLAS thread: at 8 rows a product reads each weight
# once for 8 multiply-adds, still bound by memory on current x86 cores (docs/benchmarks.md, section 9).
FEW_ROWS = 8


class WorkThreads:
    """Sets OpenBLAS's thread count for a pass of ``rows`` rows: one for a few, ``full`` otherwise."""

    def __init__(self, library: ctypes.CDLL, full: int) -> None:
        self._set = library.openblas_set_num_threads
        self._set.argtypes = [ctypes.c_int]
        self._set.restype = None
        self.full = full
        self._current = full
        self._lock = threading.Lock()  # two models' workers may set it; each call is OpenBLAS's whole state

    def threads_for(self, rows: int) -> int:
        return 1 if rows <= FEW_ROWS else self.full

    def for_rows(self, rows: int) -> None:
        wanted = self.threads_for(rows)
        if wanted != self._current:
            with self._lock:
                self._set(wanted)
                self._current = wanted

    @property
    def current(self) -> int:
        return self._current


_active: WorkThreads | None = None


def enable(library: ctypes.CDLL) -> WorkThreads | None:
    """Choose the count by the work from now on, for the loaded OpenBLAS ``library``; None when it has a single
    thread anyway (or cannot say how many it has)."""
    global _active
    try:
        get = library.openblas_get_num_threads
    except AttributeError:
        return None
    get.restype = ctypes.c_int
    full = int(get())
    if full <= 1:
        return None
    _active = WorkThreads(library, full)
    return _active


def for_rows(rows: int) -> None:
    """Before a forward pass of ``rows`` rows (a decode step: one per sequence; a prompt pass: its tokens)."""
    if _active is not None:
        _active.for_rows(rows)


def active() -> WorkThreads | None:
    return _active

"""Keeping a model worker and the MLX stream thread it drives on one CPU (``--worker-affinity auto``).

On the CPU device every operation a step builds is handed from the worker thread to the thread of its MLX stream,
and the worker sleeps and wakes on that thread's progress (mlx's scheduler keeps at most a few tasks in flight): a
few hundred hand-offs per decode step. When the two threads sit on different CPUs each hand-off is a cross-CPU
wake-up, which costs far more than the work on a virtual machine, and a worker woken onto the CPU where an OpenBLAS
helper thread is computing its half of a matrix product stalls that product. Measured on 2 vCPUs, one stream:
tiny decodes at 600 to 770 tokens/s in the kernel's bad placements and 1100 to 1200 pinned, in every turn. The
price is the overlap of the worker's Python work with the computation, which the best unpinned placement keeps
(tiny 1330 tokens/s; docs/benchmarks.md, section 1). The stream thread inherits the affinity of the thread that
creates it, so pinning the worker before it makes its stream pins both.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

import mlx.core as mx


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now (glibc's ``sched_getcpu``), or None where it cannot be asked."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        cpu = int(libc.sched_getcpu())
    except (OSError, AttributeError):
        return None
    return cpu if cpu >= 0 else None


def pin_current_thread() -> int | None:
    """Pin the calling thread to the CPU it runs on, when that helps (Linux, MLX on the CPU device, more than one
    CPU allowed); return the CPU, or None when the thread was left as it was."""
    if not sys.platform.startswith("linux") or mx.default_device() != mx.cpu:
        return None
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        return None
    cpu = current_cpu()
    if cpu is None or cpu not in allowed:
        cpu = max(allowed)
    os.sched_setaffinity(0, {cpu})  # 0: the calling thread, for Linux's sched_setaffinity
    return cpu

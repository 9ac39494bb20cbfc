"""Keeping a model worker and the MLX stream thread it drives on one CPU, taking turns (``--worker-affinity auto``).

On the CPU device every operation a step builds is handed from the worker thread to the thread of its MLX stream,
and the worker sleeps and wakes on that thread's progress (mlx's scheduler keeps at most a few tasks in flight): a
few hundred hand-offs per decode step. Two things make those hand-offs cheap:

- One CPU for both. When the two threads sit on different CPUs each hand-off is a cross-CPU wake-up, which costs
  far more than the work on a virtual machine, and a worker woken onto the CPU where an OpenBLAS helper thread is
  computing its half of a matrix product stalls that product. The kernel's placement changes from minute to
  minute, so an unpinned process decodes tiny at 600 to 770 or at 1300 to 1450 tokens/s on 2 vCPUs.
- Linux's batch scheduling policy for both. A thread woken under the normal policy preempts the one running, so
  on one CPU every hand-off was two context switches, and the pinned pair paid them instead of the wake-ups
  (1100 to 1200 tokens/s). A woken ``SCHED_BATCH`` thread waits until the running one blocks or its time slice
  ends: the worker queues a run of operations, then the stream thread computes them in one go (1850 to 2000).

Figures: docs/benchmarks.md, section 1. Both settings are inherited by the threads a thread starts, so setting
them on the worker before it makes its stream covers both threads, and only those.

Both gains are on the hand-offs, a fixed cost per step. A model whose step is mostly matrix products gains little
from them, and a thread kept on one CPU cannot move away from a CPU that other work (OpenBLAS's own threads
included) has taken. So ``auto`` pins by what the model costs: a worker
whose model reads at most ``PIN_MAX_BYTES`` of weights a token is pinned, a bigger one is left to the kernel
(docs/benchmarks.md, section 9).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import NamedTuple

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now (glibc's ``sched_getcpu``), or None where it cannot be asked."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        cpu = int(libc.sched_getcpu())
    except (OSError, AttributeError):
        return None
    return cpu if cpu >= 0 else None


# The most weight bytes a token may read for ``--worker-affinity auto`` to pin the worker: the tiny and small
# synthetic models (0.4 MB, 190 MB in float32) gain from the pin; the 180M-parameter one (726 MB) does not.
PIN_MAX_BYTES = 256 * 2**20


def pins(weight_bytes: int, cpus: int | None = None) -> bool:
    """Whether ``--worker-affinity auto`` pins the worker of a model that reads ``weight_bytes`` of weights a token,
    on a machine that allows this process ``cpus`` CPUs (default: the process's; one leaves nothing to choose)."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(os.getpid())) if hasattr(os, "sched_getaffinity") else 1
    return cpus >= 2 and weight_bytes <= PIN_MAX_BYTES


def weight_bytes(model: nn.Module) -> int:
    """The bytes of a model's parameters: what a decode step reads (``--worker-affinity auto`` pins by it)."""
    leaves = tree_flatten(model.parameters())
    assert isinstance(leaves, list)  # tree_flatten gives a dict only when asked for one
    return sum(int(array.nbytes) for _, array in leaves)


class Placement(NamedTuple):
    """Where a worker keeps itself: its CPU, and whether the batch policy could be set (a seccomp filter may
    refuse it)."""

    cpu: int
    batch_policy: bool


def keep_on_one_cpu() -> Placement | None:
    """Pin the calling thread to the CPU it runs on and give it the batch scheduling policy, when that helps
    (Linux, MLX on the CPU device, more than one CPU allowed); None when the thread was left as it was."""
    if not sys.platform.startswith("linux") or mx.default_device() != mx.cpu:
        return None
    # The process's CPUs (its first thread's), not the calling thread's: a parked worker thread that an earlier
    # worker pinned (engine.threads) allows one CPU, and keeps it.
    allowed = os.sched_getaffinity(os.getpid())
    if len(allowed) < 2:
        return None
    cpu = current_cpu()
    if cpu is None or cpu not in allowed:
        cpu = max(allowed)
    # 0 is the calling thread for both of Linux's calls; the batch policy needs no privilege.
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        return Placement(cpu, batch_policy=False)
    return Placement(cpu, batch_policy=True)

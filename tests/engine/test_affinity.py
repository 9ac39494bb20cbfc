"""--worker-affinity: a pinned thread stays on the CPU it ran on, and the threads it starts inherit the pin."""

from __future__ import annotations

import os
import sys
import threading

import mlx.core as mx

from mlxd.engine.affinity import current_cpu, pin_current_thread

# Where pinning applies: Linux, MLX on the CPU, more than one CPU allowed to this process.
PINS = sys.platform.startswith("linux") and mx.default_device() == mx.cpu and len(os.sched_getaffinity(0)) > 1


def test_a_pinned_thread_and_the_threads_it_starts_keep_one_cpu() -> None:
    before = os.sched_getaffinity(0)
    seen: dict[str, object] = {}

    def child() -> None:
        seen["child"] = os.sched_getaffinity(0)

    def pinned() -> None:
        seen["cpu"] = pin_current_thread()
        seen["own"] = os.sched_getaffinity(0)
        seen["running_on"] = current_cpu()
        started = threading.Thread(target=child)
        started.start()
        started.join()

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()

    assert os.sched_getaffinity(0) == before  # the calling thread is never touched
    if PINS:
        cpu = seen["cpu"]
        assert isinstance(cpu, int) and cpu in before
        assert seen["own"] == seen["child"] == {cpu}
        assert seen["running_on"] == cpu
    else:
        assert seen["cpu"] is None and seen["own"] == seen["child"] == before

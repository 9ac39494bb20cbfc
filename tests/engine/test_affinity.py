"""--worker-affinity: a pinned thread stays on the CPU it ran on under the batch policy, and the threads it starts
inherit both."""

from __future__ import annotations

import os
import sys
import threading

import mlx.core as mx
import pytest

from mlxd.engine.cpu.affinity import current_cpu, keep_on_one_cpu

# Where pinning applies: Linux, MLX on the CPU, more than one CPU allowed to this process.
PINS = sys.platform.startswith("linux") and mx.default_device() == mx.cpu and len(os.sched_getaffinity(0)) > 1


def test_a_pinned_thread_and_the_threads_it_starts_keep_one_cpu_and_the_batch_policy() -> None:
    if not sys.platform.startswith("linux"):  # neither the pin nor the policy exists there
        assert keep_on_one_cpu() is None
        return
    before, policy = os.sched_getaffinity(0), os.sched_getscheduler(0)
    seen: dict[str, object] = {}

    def child() -> None:
        seen["child"] = os.sched_getaffinity(0)
        seen["child_policy"] = os.sched_getscheduler(0)

    def pinned() -> None:
        seen["placement"] = keep_on_one_cpu()
        seen["own"] = os.sched_getaffinity(0)
        seen["own_policy"] = os.sched_getscheduler(0)
        seen["running_on"] = current_cpu()
        started = threading.Thread(target=child)
        started.start()
        started.join()

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()

    assert (os.sched_getaffinity(0), os.sched_getscheduler(0)) == (before, policy)  # the caller is never touched
    if PINS:
        placement = seen["placement"]
        assert placement is not None and placement.batch_policy and placement.cpu in before
        cpu = placement.cpu
        assert seen["own"] == seen["child"] == {cpu}
        assert seen["running_on"] == cpu
        assert seen["own_policy"] == seen["child_policy"] == os.SCHED_BATCH
    else:
        assert seen["placement"] is None and seen["own"] == seen["child"] == before
        assert seen["own_policy"] == seen["child_policy"] == policy


@pytest.mark.skipif(not PINS, reason="the pin applies on Linux, with MLX on the CPU and more than one CPU")
def test_a_refused_batch_policy_keeps_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:  # as a seccomp filter answering EPERM
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    seen: dict[str, object] = {}

    def pinned() -> None:
        seen["placement"], seen["own"] = keep_on_one_cpu(), os.sched_getaffinity(0)

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()
    placement = seen["placement"]
    assert placement is not None and not placement.batch_policy and seen["own"] == {placement.cpu}

"""--worker-affinity: a pinned thread stays on the CPU it ran on under the batch policy, and the threads it starts
inherit both."""

from __future__ import annotations

import os
import sys
import threading

import mlx.core as mx
import pytest

from mlxd.engine.cpu import affinity
from mlxd.engine.cpu.affinity import PIN_MAX_BYTES, current_cpu, keep_on_one_cpu, pins

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


MIB = 2**20


@pytest.mark.parametrize(
    ("weights", "cpus", "pinned"),
    [
        (2 * MIB, 2, True),  # host cost dominates its step (the tiny fixture: 0.4 MB)
        (190 * MIB, 2, True),  # the synthetic small, float32: the pin still gained at one stream
        (PIN_MAX_BYTES, 16, True),
        (PIN_MAX_BYTES + 1, 2, False),
        (726 * MIB, 2, False),  # the 180M-parameter pair's MLX side: a step is matrix products
        (2400 * MIB, 16, False),  # a 0.6B model in float32
        (2 * MIB, 1, False),  # one CPU: nothing to choose
    ],
)
def test_auto_pins_a_worker_by_the_weights_its_model_reads_a_token(weights: int, cpus: int, pinned: bool) -> None:
    assert pins(weights, cpus) is pinned


def test_the_weights_a_model_reads_are_its_parameters_bytes(tiny_model: object) -> None:
    from mlx.utils import tree_flatten

    from mlxd.engine.cpu.affinity import weight_bytes

    model = tiny_model.model  # type: ignore[attr-defined]
    sizes = [a.size * a.itemsize for _, a in tree_flatten(model.parameters())]
    assert weight_bytes(model) == sum(sizes) > 0


@pytest.mark.skipif(not PINS, reason="the pin applies on Linux, with MLX on the CPU and more than one CPU")
@pytest.mark.parametrize("limit", [0, None])
def test_a_worker_is_pinned_only_below_the_limit(tiny_model: object, limit: int | None,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    from mlxd.engine.batching.worker import ModelWorker
    from mlxd.engine.settings import WorkerSettings

    if limit is not None:
        monkeypatch.setattr(affinity, "PIN_MAX_BYTES", limit)
    caplog.set_level("INFO", logger="mlxd.engine.batching.worker")
    worker = ModelWorker(tiny_model, WorkerSettings(warmup=False))  # type: ignore[arg-type]
    worker.start()
    worker.stop()

    pinned = [r.getMessage() for r in caplog.records if "pinned to CPU" in r.getMessage()]
    left = [r.getMessage() for r in caplog.records if "left to the kernel's placement" in r.getMessage()]
    assert (len(pinned), len(left)) == ((0, 1) if limit == 0 else (1, 0))

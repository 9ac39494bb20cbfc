"""MLX work off the model workers runs on parked threads (mlxd.engine.threads): mlx keeps one scheduler thread for
every stream ever made, so a thread per call left an OS thread behind each time (issue 28, router churn)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from mlxd.engine.batching.worker import ModelWorker, WorkerSettings
from mlxd.engine.threads import run_on_own_thread
from tests.engine.conftest import final, greedy_request

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc (Linux)")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _work(scale: float) -> float:
    x = mx.ones((16, 16)) * scale
    return float((x @ x).sum().item())


def test_calls_one_after_another_reuse_one_thread() -> None:
    run_on_own_thread(_work, 1.0)  # the first call may make the parked thread and its streams
    before = _threads()
    assert [run_on_own_thread(_work, float(i)) for i in range(20)] == [16 * 16 * 16 * i * i for i in range(20)]
    assert _threads() == before


def test_a_call_runs_off_the_caller_and_its_error_comes_back() -> None:
    caller = threading.get_ident()
    assert run_on_own_thread(threading.get_ident) != caller
    assert run_on_own_thread(lambda: threading.current_thread().name, name="mlxd-load") == "mlxd-load"

    def fails() -> None:
        raise ValueError("from the parked thread")

    with pytest.raises(ValueError, match="from the parked thread"):
        run_on_own_thread(fails)
    assert run_on_own_thread(_work, 2.0) == 16 * 16 * 16 * 4  # the thread still serves after an error


def test_calls_at_once_each_get_a_thread() -> None:
    gate = threading.Barrier(3, timeout=30)
    seen: list[int] = []

    def meet() -> None:
        gate.wait()
        seen.append(threading.get_ident())

    callers = [threading.Thread(target=run_on_own_thread, args=(meet,)) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(60)
    assert len(set(seen)) == 3  # three waited on one another at once: three parked threads


def test_model_workers_one_after_another_reuse_one_thread(tiny_model: Any) -> None:
    """A model loaded and unloaded again and again (router churn) leaves no thread behind: mlx's scheduler thread
    of each worker's stream would otherwise stay for good. The output stays the same on the reused thread."""

    def cycle() -> list[int]:
        worker = ModelWorker(tiny_model, WorkerSettings(ctx_size=512))
        worker.start()
        try:
            return final(worker.submit(greedy_request([1, 2, 3, 4], n_predict=6))).tokens
        finally:
            worker.stop()

    first = cycle()
    before = _threads()
    assert [cycle() for _ in range(5)] == [first] * 5
    assert _threads() == before


def test_a_parked_thread_keeps_nothing_of_a_finished_call() -> None:
    """What a call closed over or returned (a served model, a worker) is freed once the caller lets it go, not kept
    alive by the parked thread until its next job."""
    import gc
    import weakref

    class Held:
        pass

    held = Held()
    ref = weakref.ref(held)
    returned = run_on_own_thread(lambda: held)
    assert returned is held
    del held, returned
    gc.collect()
    assert ref() is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or mx.default_device() != mx.cpu,
                    reason="a worker pins itself only on the CPU device with two CPUs or more")
def test_a_worker_that_is_not_pinned_never_gets_a_pinned_workers_thread(tiny_model: Any) -> None:
    """Parked worker threads keep the pin (and the batch policy) a pinned worker gave them, and so does the stream
    thread mlx made for them: a worker with --worker-affinity off must run on a thread that was never pinned."""
    allowed = os.sched_getaffinity(0)

    def cpus_of_worker(affinity: str) -> set[int]:
        worker = ModelWorker(tiny_model, WorkerSettings(ctx_size=512, worker_affinity=affinity))
        worker.start()
        try:
            final(worker.submit(greedy_request([1, 2, 3], n_predict=2)))
            thread = next(t for t in threading.enumerate() if t.name.startswith("mlxd-worker-"))
            assert thread.native_id is not None
            return os.sched_getaffinity(thread.native_id)
        finally:
            worker.stop()

    assert len(cpus_of_worker("auto")) == 1
    assert cpus_of_worker("off") == allowed
    assert len(cpus_of_worker("auto")) == 1

"""Threads that do MLX work, kept parked between jobs, and why they never end before the process does.

Since mlx 0.32 every stream belongs to the thread that made it (a thread's default stream included) and is torn
down by that thread's C++ thread-local destructors. Those run after Python's ``join()`` has returned; if the
interpreter is finalizing by then, the process aborts ("terminate called without an active exception"). mlx's
remedy is ``mx.clear_streams()`` as a thread's last MLX call; after it the thread can do no more MLX work, so a
pooled thread (asyncio's default executor) must never touch MLX. MLX work therefore runs on parked threads of
mlxd's own (model workers through ``start_on_parked_thread``, loads and releases through ``run_on_own_thread``),
which never end: see ``_Parked`` for what ending them cost.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, TypeVar

import mlx.core as mx

T = TypeVar("T")


def release_streams() -> None:
    """Finish this thread's MLX work and destroy its streams; the thread must do no MLX work afterwards."""
    mx.synchronize()
    mx.clear_streams()


def _done() -> None:
    """What a finished job's call becomes."""


class Job:
    """A call handed to a parked thread: wait for it with ``result()``, or ask ``done()``."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        self.fn, self.name = fn, name
        self._finished = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def finish(self, value: Any, error: BaseException | None) -> None:
        self._value, self._error = value, error
        self._finished.set()

    def done(self) -> bool:
        return self._finished.is_set()

    def result(self) -> Any:
        self._finished.wait()
        if self._error is not None:
            raise self._error
        return self._value


class _Parked:
    """A daemon thread that runs MLX jobs one at a time and keeps its streams between them.

    mlx keeps one scheduler thread for every stream it ever made (``Scheduler::threads_`` in mlx/scheduler.cpp never
    shrinks; ``clear_streams`` empties only the command encoders), and a thread's first MLX call makes it a default
    stream. A thread per model worker, per load and per memory release therefore left OS threads behind each time,
    each holding the stack its kernels touched (about 0.5 MiB): after a minute of router churn the daemon held 480
    threads with every model unloaded. A parked thread makes its stream once and serves job after job. It ends with
    the process: blocked in ``get()``, it runs no thread-local destructor at exit, so the abort described above
    cannot happen."""

    def __init__(self, home: list["_Parked"]) -> None:
        self._home = home
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=_IDLE_NAME, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        thread = threading.current_thread()
        while True:
            job = self._jobs.get()
            thread.name = job.name
            value: Any = None
            error: BaseException | None = None
            try:
                value = job.fn()
            except BaseException as exc:  # handed to whoever waits on the job
                error = exc
            try:
                mx.synchronize()  # the job's work is finished when its caller resumes
            except Exception as exc:  # noqa: BLE001 - a stream's error belongs to the job that caused it
                error = error or exc
            thread.name = _IDLE_NAME
            job.fn = _done  # the call's closure (a worker, a model) must not outlive it here
            with _parked_lock:
                self._home.append(self)
            job.finish(value, error)
            # Nothing of the job stays on this parked thread's frame: a served model or a worker kept here would
            # live until the thread's next job.
            del job, value, error

    def submit(self, job: Job) -> Job:
        self._jobs.put(job)
        return job


_IDLE_NAME = "mlxd-mlx"
_parked_lock = threading.Lock()
# Separate pools: a model worker pins its thread (and so its stream's thread, made by its first MLX call) to a CPU
# with the batch policy (engine.cpu.affinity), which loads and memory releases must not inherit, nor a worker that
# is not pinned; and a pinned worker needs a stream thread made after the pin, which a free thread's is not.
_parked_calls: list[_Parked] = []
_parked_workers: dict[bool, list[_Parked]] = {False: [], True: []}


def _submit(pool: list[_Parked], fn: Callable[[], Any], name: str) -> Job:
    with _parked_lock:
        thread = pool.pop() if pool else None
    return (thread or _Parked(pool)).submit(Job(fn, name))


def run_on_own_thread(fn: Callable[..., T], *args: Any, name: str = "mlxd-mlx") -> T:
    """Run ``fn(*args)`` on a parked MLX thread (never the caller's, which may be a pooled one) and return (or raise)
    what it did. Calls at once get threads of their own; the process keeps as many parked threads as it ever ran
    such calls at once (a load or two, a memory release)."""
    value: T = _submit(_parked_calls, lambda: fn(*args), name).result()
    return value


def start_on_parked_thread(fn: Callable[[], None], name: str, *, pinned: bool) -> Job:
    """Start ``fn()`` (a model worker's loop) on a parked worker thread, one that has always been ``pinned`` to a
    CPU or never; the returned job tells when it ended."""
    return _submit(_parked_workers[pinned], fn, name)

"""Threads that do MLX work, and how they end without taking the process down at exit.

Since mlx 0.32 every stream belongs to the thread that made it (a thread's default stream included) and is torn
down by that thread's C++ thread-local destructors. Those run after Python's ``join()`` has returned; if the
interpreter is finalizing by then, the process aborts ("terminate called without an active exception"). mlx's
remedy is ``mx.clear_streams()`` as a thread's last MLX call; after it the thread can do no more MLX work, so a
pooled thread (asyncio's default executor) must never touch MLX. Off the model worker, MLX work therefore runs on a
thread of its own through ``run_on_own_thread``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, TypeVar

import mlx.core as mx

T = TypeVar("T")


def release_streams() -> None:
    """Finish this thread's MLX work and destroy its streams; the thread must do no MLX work afterwards."""
    mx.synchronize()
    mx.clear_streams()


def run_on_own_thread(fn: Callable[..., T], *args: Any, name: str = "mlxd-mlx") -> T:
    """Run ``fn(*args)`` on a new thread that releases its streams, and return (or raise) what it did.

    Blocks until the operating system has ended that thread, so nothing of it outlives the call.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc
        finally:
            release_streams()

    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join()
    wait_os_thread_exit(thread)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def wait_os_thread_exit(thread: threading.Thread, timeout: float = 2.0) -> None:
    """Wait until the operating system has finished the thread, not just its Python part.

    A thread's C++ thread-local destructors run after ``join()`` returns and may need the GIL; if the interpreter
    is shutting down by then, the process aborts. On Linux the thread's /proc entry tells when it is gone;
    elsewhere there is nothing to wait on.
    """
    tid = thread.native_id
    if tid is None or not os.path.isdir("/proc/self/task"):
        return
    task = f"/proc/self/task/{tid}"
    deadline = time.monotonic() + timeout
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0.001)

"""--worker-affinity: the daemon's model worker and its MLX stream thread share one CPU under the batch scheduling
policy, or are left alone."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import mlx.core as mx

PINS = sys.platform.startswith("linux") and mx.default_device() == mx.cpu and len(os.sched_getaffinity(0)) > 1


def threads(pid: int) -> list[tuple[str, int]]:
    """Each thread's ``Cpus_allowed_list`` and scheduling policy (``os.SCHED_*``), from /proc."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status, stat = (task / "status").read_text(), (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
        allowed = next(line.split(":", 1)[1].strip() for line in status.splitlines()
                       if line.startswith("Cpus_allowed_list:"))
        policy = int(stat.rsplit(")", 1)[1].split()[38])  # field 41 of proc_pid_stat(5), after "pid (comm)"
        found.append((allowed, policy))
    return found


def generate(server) -> None:
    """One completion: the worker's MLX stream thread starts with its first operation."""
    with server.client() as client:
        assert client.post("/completion", json={"prompt": "Hello", "n_predict": 4}).status_code == 200


def test_auto_pins_the_worker_with_its_stream_thread_under_batch_scheduling(start_server) -> None:
    server = start_server()  # --worker-affinity auto is the default
    generate(server)
    pinned = re.search(r"model worker pinned to CPU (\d+) with its MLX stream thread, batch scheduling", server.log())
    if not PINS:
        assert pinned is None
        return
    assert pinned, server.log()
    found = threads(server.process.pid)
    pair = [policy for allowed, policy in found if allowed == pinned.group(1)]
    assert len(pair) >= 2 and set(pair) == {os.SCHED_BATCH}, found  # the worker and the stream thread it made
    others = {(allowed, policy) for allowed, policy in found if allowed != pinned.group(1)}
    assert len(others) == 1 and others.pop()[1] == os.SCHED_OTHER, found  # every other thread as it was


def test_off_leaves_every_thread_on_the_process_cpus(start_server) -> None:
    server = start_server("--worker-affinity", "off")
    generate(server)
    assert "pinned to CPU" not in server.log()
    found = set(threads(server.process.pid))
    assert len(found) == 1 and found.pop()[1] == os.SCHED_OTHER, found

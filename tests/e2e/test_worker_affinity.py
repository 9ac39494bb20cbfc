"""--worker-affinity: the daemon's model worker and its MLX stream thread share one CPU, or are left alone."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import mlx.core as mx

PINS = sys.platform.startswith("linux") and mx.default_device() == mx.cpu and len(os.sched_getaffinity(0)) > 1


def allowed_cpus(pid: int) -> list[str]:
    """Each thread's ``Cpus_allowed_list`` from /proc."""
    lists = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        lists += [line.split(":", 1)[1].strip() for line in status.splitlines()
                  if line.startswith("Cpus_allowed_list:")]
    return lists


def generate(server) -> None:
    """One completion: the worker's MLX stream thread starts with its first operation."""
    with server.client() as client:
        assert client.post("/completion", json={"prompt": "Hello", "n_predict": 4}).status_code == 200


def test_auto_pins_the_worker_with_its_stream_thread(start_server) -> None:
    server = start_server()  # --worker-affinity auto is the default
    generate(server)
    pinned = re.search(r"model worker pinned to CPU (\d+) with its MLX stream thread", server.log())
    if not PINS:
        assert pinned is None
        return
    assert pinned, server.log()
    lists = allowed_cpus(server.process.pid)
    assert lists.count(pinned.group(1)) >= 2, lists  # the worker and the stream thread it made
    assert len(set(lists)) == 2, lists  # every other thread keeps the process's CPUs


def test_off_leaves_every_thread_on_the_process_cpus(start_server) -> None:
    server = start_server("--worker-affinity", "off")
    generate(server)
    assert "pinned to CPU" not in server.log()
    assert len(set(allowed_cpus(server.process.pid))) == 1

"""``/props`` reports which BLAS mlx's CPU backend runs on (``--cpu-blas``), as the startup log does."""

from __future__ import annotations

import re
from typing import Callable

from tests.e2e.conftest import RunningServer


def test_props_build_info_names_the_blas(server: RunningServer) -> None:
    with server.client() as client:
        build = client.get("/props").json()["build_info"]
    # b10621's shape first (b<build>-<commit>): the build mlxd serves the surface of, then mlxd's own version.
    match = re.fullmatch(r"b10621-mlxd-\S+ \(cpu-blas: (system|bundled|platform)\)", build)
    assert match, build
    assert f"cpu-blas auto: {match.group(1)}" in server.log()


def test_threads_set_openblas_threads(start_server: Callable[..., RunningServer]) -> None:
    """``-t`` is the thread count of the BLAS the CPU backend's products run on (OpenBLAS, read once at start)."""
    running = start_server("-t", "2")
    with running.client() as client:
        build = client.get("/props").json()["build_info"]
    if "cpu-blas: system" in build:
        assert re.search(r"cpu-blas auto: system \(\S+, 2 threads\)", running.log()), running.log()
    else:  # no OpenBLAS to load here (macOS, CUDA, none installed): nothing reads it
        assert ", 2 threads)" not in running.log()

"""``/props`` reports which BLAS mlx's CPU backend runs on (``--cpu-blas``), as the startup log does."""

from __future__ import annotations

import re
import shutil
from typing import Callable

from mlxd.engine.cpu import gemv_shim
from tests.e2e.conftest import RunningServer


def test_props_build_info_names_the_blas(server: RunningServer) -> None:
    with server.client() as client:
        build = client.get("/props").json()["build_info"]
    # b10621's shape first (b<build>-<commit>): the build mlxd serves the surface of, then mlxd's own version.
    # Then the BLAS: the choice, and for an OpenBLAS its version and the kernels it picked for this CPU.
    # And whether decode products go to mlxd's row kernel (--cpu-gemv auto, where a C compiler built it).
    match = re.fullmatch(r"b10621-mlxd-\S+ \(cpu-blas: (system|packaged|bundled|platform)"
                         r"(, OpenBLAS ([0-9.]+), (\w+) kernels)?(, decode products through mlxd's row kernel)?\)", build)
    assert match, build
    chosen, openblas, version, kernels, gemv = match.groups()
    assert (openblas is not None) == (chosen in ("system", "packaged")), build
    log = server.log()
    assert f"cpu-blas auto: {chosen}" in log
    if openblas:
        assert f"OpenBLAS {version}, {kernels} kernels" in log
    row_kernel = f"cpu-gemv auto: products of up to {gemv_shim.MAX_ROWS} rows through mlxd's row kernel"
    assert (gemv is not None) == (row_kernel in log), log
    # mlx's fused CPU kernels built for this CPU (--cpu-jit auto) wherever mlx has a g++ to build them with.
    assert ("cpu-jit auto: mlx's fused CPU kernels built for this CPU" in log) == (shutil.which("g++") is not None), log


def test_threads_set_openblas_threads(start_server: Callable[..., RunningServer]) -> None:
    """``-t`` is the thread count of the BLAS the CPU backend's products run on (OpenBLAS, read once at start)."""
    running = start_server("-t", "2")
    with running.client() as client:
        build = client.get("/props").json()["build_info"]
    if "cpu-blas: system" in build or "cpu-blas: packaged" in build:
        assert re.search(r"cpu-blas auto: (system|packaged) \(\S+, 2 threads\)", running.log()), running.log()
    else:  # no OpenBLAS to load here (macOS, CUDA, none installed): nothing reads it
        assert ", 2 threads)" not in running.log()

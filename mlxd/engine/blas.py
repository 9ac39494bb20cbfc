"""Which BLAS mlx's CPU backend calls (``--cpu-blas auto|system|bundled``).

mlx's Linux CPU wheel bundles the reference BLAS, which is some 30 times slower at float32 matmuls than an optimised
one. Loading the system's OpenBLAS with ``RTLD_GLOBAL`` before mlx is first imported puts its ``cblas_*`` symbols
in the process's global scope, where mlx's own library finds them before the bundled copy. This module must not
import mlx: ``preload`` only has an effect when it runs first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import logging
import os
import platform
import sys
from dataclasses import dataclass
from typing import Literal

from mlxd.errors import EngineError

BlasMode = Literal["auto", "system", "bundled"]
BlasChoice = Literal["system", "bundled", "platform"]

log = logging.getLogger("mlxd.engine.blas")

# How long an idle OpenBLAS thread spins before it sleeps, as OpenBLAS's OPENBLAS_THREAD_TIMEOUT: 2^20 cycles, about
# 0.3 ms, where OpenBLAS's default (2^28) spins for about 0.1 s after every threaded product. Under steady decoding a
# product comes every step, so the default keeps a helper spinning on a CPU without pause (93 % of a vCPU with tiny
# at 8 streams), where the HTTP server's event loop and the clients need it, and the step then waits for a helper
# that they preempted. 2^20 still covers the gaps between one step's products. Measured side by side on 2 vCPUs
# (docs/benchmarks.md, section 1): tiny at 8 and 16 streams 1.07 to 1.30 x, small unchanged within its spread.
THREAD_TIMEOUT = 20

# Debian/Ubuntu (pthread and openmp variants, then the alternatives link), Fedora/RHEL, Arch, Alpine.
_CANDIDATES = (
    "/usr/lib/{arch}-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
    "/usr/lib/libopenblas.so",
)


@dataclass(frozen=True)
class BlasReport:
    """What ``preload`` did: the mode asked for, the BLAS mlx will use, the library loaded, and why."""

    mode: BlasMode
    chosen: BlasChoice  # "platform": macOS (Accelerate) or CUDA, where the choice does not apply
    library: str | None
    reason: str
    threads: int | None = None  # OpenBLAS threads set by ``preload`` (--threads); None leaves OpenBLAS's own choice
    thread_timeout: int | None = None  # OPENBLAS_THREAD_TIMEOUT in force (2^N cycles), when mlxd loaded OpenBLAS

    def describe(self) -> str:
        """One line for the startup log (``/props`` reports ``chosen``)."""
        where = f" ({self.library}" + (f", {self.threads} threads)" if self.threads else ")") if self.library else ""
        spin = f"; idle threads sleep after 2^{self.thread_timeout} cycles" if self.thread_timeout else ""
        return f"cpu-blas {self.mode}: {self.chosen}{where}: {self.reason}{spin}"


_report: BlasReport | None = None


def preload(mode: BlasMode = "auto", *, threads: int | None = None) -> BlasReport:
    """Load the system OpenBLAS ahead of mlx when ``mode`` allows it; call before anything imports mlx.

    ``threads`` (``--threads``), when positive, sets OpenBLAS's thread count, which it reads once, at load;
    otherwise OpenBLAS decides (OPENBLAS_NUM_THREADS if the operator set it, else one thread per CPU).
    The first call decides for the whole process; later calls with the same mode return the same report.
    ``system`` raises :class:`EngineError` when no OpenBLAS is found or mlx was imported too early.
    """
    global _report
    if mode not in ("auto", "system", "bundled"):
        raise EngineError(f"cpu-blas: unknown mode {mode!r}; choose auto, system or bundled")
    if _report is not None:
        if _report.mode != mode and _report.chosen != "platform":
            raise EngineError(
                f"cpu-blas {mode}: the BLAS was already chosen for this process ({_report.describe()})"
            )
        return _report
    _report = _decide(mode, threads if threads and threads > 0 else None)
    log.info("%s", _report.describe())
    return _report


def _decide(mode: BlasMode, threads: int | None) -> BlasReport:
    if sys.platform != "linux":
        return BlasReport(mode, "platform", None, f"{sys.platform} uses the platform's BLAS; nothing to load")
    if _has_cuda_backend():
        return BlasReport(mode, "platform", None, "mlx's CUDA backend is installed; nothing to load")
    if mode == "bundled":
        return BlasReport(mode, "bundled", None, "asked for mlx's bundled BLAS")
    if "mlx.core" in sys.modules:
        reason = "mlx was imported before the BLAS could be chosen"
        if mode == "system":
            raise EngineError(f"cpu-blas system: {reason}")
        return BlasReport(mode, "bundled", None, reason)
    path = find_openblas()
    if path is None:
        if mode == "system":
            raise _no_openblas()
        return BlasReport(mode, "bundled", None, "no system OpenBLAS found, so float32 products run some 30 times "
                              "slower: install libopenblas0-pthread (Debian/Ubuntu) or openblas (Fedora, Arch)")
    if threads is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    # Read by OpenBLAS once, as it loads; an operator's own value wins.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", str(THREAD_TIMEOUT))
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        if mode == "system":
            raise EngineError(f"cpu-blas system: cannot load {path}: {exc}") from exc
        return BlasReport(mode, "bundled", None, f"cannot load {path}: {exc}")
    return BlasReport(mode, "system", path, "system OpenBLAS loaded ahead of mlx", threads, _thread_timeout())


def check(mode: str) -> None:
    """What ``preload`` would refuse for ``mode``, decided without loading anything (``mlxd config check``)."""
    if mode not in ("auto", "system", "bundled"):
        raise EngineError(f"cpu-blas: unknown mode {mode!r}; choose auto, system or bundled")
    if mode == "system" and sys.platform == "linux" and not _has_cuda_backend() and find_openblas() is None:
        raise _no_openblas()


def _no_openblas() -> EngineError:
    return EngineError(
        "cpu-blas system: no OpenBLAS library found (install libopenblas0-pthread or use --cpu-blas auto)"
    )


def _thread_timeout() -> int | None:
    """OPENBLAS_THREAD_TIMEOUT as OpenBLAS reads it (a positive integer, clamped to 4..30), or None where OpenBLAS
    keeps its default."""
    try:
        value = int(os.environ["OPENBLAS_THREAD_TIMEOUT"])
    except (KeyError, ValueError):
        return None
    return min(30, max(4, value)) if value > 0 else None


def find_openblas() -> str | None:
    """The path of the system's OpenBLAS shared library, or None."""
    arch = platform.machine()
    for pattern in _CANDIDATES:
        path = pattern.format(arch=arch)
        if os.path.exists(path):
            return path
    name = ctypes.util.find_library("openblas")
    return name  # a soname the dynamic loader resolves, or None


def _has_cuda_backend() -> bool:
    for dist in ("mlx-cuda", "mlx-cuda-12", "mlx-cuda-13"):
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return True
    return False

"""Which BLAS mlx's CPU backend calls (``--cpu-blas auto|system|packaged|bundled``).

mlx's Linux CPU wheel bundles the reference BLAS, which is some 30 times slower at float32 matmuls than an optimised
one. Loading an OpenBLAS with ``RTLD_GLOBAL`` before mlx is first imported puts its ``cblas_*`` and LAPACK symbols
in the process's global scope, where mlx's own library finds them before the bundled copy. Two OpenBLAS libraries
can be loaded: the system's and the packaged one (mlxd's dependency on Linux x86_64; mlxd.engine.cpu.blas_libs says
which package and why, and which one ``auto`` takes). This module must not import mlx: ``preload`` only has an
effect when it runs first.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import logging
import os
import sys
from dataclasses import dataclass
from typing import Literal

from mlxd.engine.cpu import gemv_shim, gfortran
from mlxd.engine.cpu.blas_kernel import Kernel, generic_warning, identify, read_cpu_flags
from mlxd.engine.cpu.blas_libs import (
    PACKAGED_DIST,
    Library,
    choose,
    find_openblas,
    find_packaged,
    packaged_library,
    system_library,
)
from mlxd.errors import EngineError

__all__ = ["GEMV_MODES", "MODES", "GemvMode", "THREAD_TIMEOUT", "BlasMode", "BlasReport", "check", "find_openblas",
           "find_packaged", "preload"]

BlasMode = Literal["auto", "system", "packaged", "bundled"]
BlasChoice = Literal["system", "packaged", "bundled", "platform"]
MODES: tuple[BlasMode, ...] = ("auto", "system", "packaged", "bundled")
GemvMode = Literal["auto", "off"]
GEMV_MODES: tuple[GemvMode, ...] = ("auto", "off")

log = logging.getLogger("mlxd.engine.cpu.blas")

# How long an idle OpenBLAS thread spins before it sleeps, as OpenBLAS's OPENBLAS_THREAD_TIMEOUT: 2^20 cycles, about
# 0.3 ms, where OpenBLAS's default (2^28) spins for about 0.1 s after every threaded product. Under steady decoding a
# product comes every step, so the default keeps a helper spinning on a CPU without pause (93 % of a vCPU with tiny
# at 8 streams), where the HTTP server's event loop and the clients need it, and the step then waits for a helper
# that they preempted. 2^20 still covers the gaps between one step's products. Measured side by side on 2 vCPUs
# (docs/benchmarks.md, section 1): tiny at 8 and 16 streams 1.07 to 1.30 x, small unchanged within its spread.
THREAD_TIMEOUT = 20

@dataclass(frozen=True)
class BlasReport:
    """What ``preload`` did: the mode asked for, the BLAS mlx will use, the library loaded, and why."""

    mode: BlasMode
    chosen: BlasChoice  # "platform": macOS (Accelerate) or CUDA, where the choice does not apply
    library: str | None
    reason: str
    threads: int | None = None  # OpenBLAS threads set by ``preload`` (--threads); None leaves OpenBLAS's own choice
    thread_timeout: int | None = None  # OPENBLAS_THREAD_TIMEOUT in force (2^N cycles), when mlxd loaded OpenBLAS
    kernel: Kernel | None = None  # what the loaded OpenBLAS says of itself
    warning: str | None = None  # logged as a warning: generic kernels on a CPU with AVX2 or AVX-512
    gemv: str | None = None  # --cpu-gemv: how few-row products run (mlxd.engine.cpu.gemv_shim), when OpenBLAS loaded
    shim: gemv_shim.Shim | None = None  # the loaded sgemm front, when few-row products go to the row kernel

    def describe(self) -> str:
        """One line for the startup log."""
        where = f" ({self.library}" + (f", {self.threads} threads)" if self.threads else ")") if self.library else ""
        kernel = f"; {self.kernel.describe()}" if self.kernel else ""
        spin = f"; idle threads sleep after 2^{self.thread_timeout} cycles" if self.thread_timeout else ""
        gemv = f"; {self.gemv}" if self.gemv else ""
        return f"cpu-blas {self.mode}: {self.chosen}{where}: {self.reason}{kernel}{spin}{gemv}"

    def summary(self) -> str:
        """The choice, the library's version and its kernels, for ``/props``'s build_info."""
        text = f"{self.chosen}, {self.kernel.describe()}" if self.kernel else self.chosen
        return text + (", decode products through mlxd's row kernel" if self.shim is not None else "")


_report: BlasReport | None = None


def preload(mode: BlasMode = "auto", *, threads: int | None = None, gemv: GemvMode = "auto") -> BlasReport:
    """Load an OpenBLAS ahead of mlx when ``mode`` allows it; call before anything imports mlx.

    ``threads`` (``--threads``), when positive, sets OpenBLAS's thread count, which it reads once, at load;
    otherwise OpenBLAS decides (OPENBLAS_NUM_THREADS if the operator set it, else one thread per CPU).
    ``gemv`` (``--cpu-gemv``): ``auto`` sends products of a few rows (decode steps) to mlxd's row kernel where a C
    compiler can build it (mlxd.engine.cpu.gemv_shim); ``off`` leaves every product to sgemm.
    The first call decides for the whole process; later calls with the same mode return the same report.
    ``system`` and ``packaged`` raise :class:`EngineError` when that library is missing or cannot be loaded, or mlx
    was imported too early.
    """
    global _report
    if mode not in MODES:
        raise _unknown(mode)
    if gemv not in GEMV_MODES:
        raise EngineError(f"cpu-gemv: unknown mode {gemv!r}; choose auto or off")
    if _report is not None:
        if _report.mode != mode and _report.chosen != "platform":
            raise EngineError(
                f"cpu-blas {mode}: the BLAS was already chosen for this process ({_report.describe()})"
            )
        return _report
    _report = _decide(mode, threads if threads and threads > 0 else None, gemv)
    log.info("%s", _report.describe())
    if _report.warning:
        log.warning("%s", _report.warning)
    return _report


def _decide(mode: BlasMode, threads: int | None, gemv: GemvMode) -> BlasReport:
    if sys.platform != "linux":
        return BlasReport(mode, "platform", None, f"{sys.platform} uses the platform's BLAS; nothing to load")
    if _has_cuda_backend():
        return BlasReport(mode, "platform", None, "mlx's CUDA backend is installed; nothing to load")
    if mode == "bundled":
        return BlasReport(mode, "bundled", None, "asked for mlx's bundled BLAS")
    if "mlx.core" in sys.modules:
        reason = "mlx was imported before the BLAS could be chosen"
        if mode != "auto":
            raise EngineError(f"cpu-blas {mode}: {reason}")
        return BlasReport(mode, "bundled", None, reason)
    if mode == "auto":
        system, packaged = system_library(), packaged_library()
        first, reason = choose(system, packaged)
        order = [lib for lib in (first, system, packaged) if lib is not None]
    else:
        found = system_library() if mode == "system" else packaged_library()
        if found is None:
            raise _missing(mode)
        order, reason = [found], f"asked for the {mode} OpenBLAS"
    if threads is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    # Read by OpenBLAS once, as it loads; an operator's own value wins.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", str(THREAD_TIMEOUT))
    failures: list[str] = []
    for library in dict.fromkeys(order):  # the choice first, then the other one if it will not load
        try:
            handle, how, shim, gemv_note = _load(library, gemv)
        except OSError as exc:
            if mode != "auto":
                raise EngineError(f"cpu-blas {mode}: cannot load {library.path}: {exc}") from exc
            failures.append(f"cannot load the {library.source} OpenBLAS {library.path}: {exc}")
            continue
        kernel = identify(handle)
        why = "; ".join([*failures, reason + how])
        return BlasReport(mode, library.source, library.path, why, threads, _thread_timeout(), kernel,
                          generic_warning(kernel, read_cpu_flags()), gemv_note, shim)
    return BlasReport(mode, "bundled", None, "; ".join(failures) or reason)


def _load(library: Library, gemv: GemvMode) -> tuple[ctypes.CDLL, str, gemv_shim.Shim | None, str]:
    """Load ``library`` into the global scope; the packaged one with mlx-cpu's libgfortran where the system has
    none; with ``gemv`` auto, the sgemm front (mlxd.engine.cpu.gemv_shim) ahead of it. Returns the handle, how it was
    loaded, the front, and what became of few-row products (for the log)."""
    how = ""
    try:
        local = ctypes.CDLL(library.path, mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        if library.source != "packaged" or "libgfortran" not in str(exc):
            raise
        runtime = gfortran.provide()
        local = ctypes.CDLL(library.path, mode=ctypes.RTLD_LOCAL)
        how = f", with mlx-cpu's Fortran runtime ({runtime.name})"
    shim, note = _front(local, gemv)
    # Loading it again with RTLD_GLOBAL makes its names global, after the front's cblas_sgemm.
    return ctypes.CDLL(library.path, mode=ctypes.RTLD_GLOBAL), how, shim, note


def _front(openblas: ctypes.CDLL, gemv: GemvMode) -> tuple[gemv_shim.Shim | None, str]:
    """The sgemm front that takes products of a few rows from sgemm, where asked for and buildable, and a note for
    the log."""
    if gemv == "off":
        return None, "cpu-gemv off: every product through sgemm"
    cc = gemv_shim.compiler()
    if cc is None:
        return None, "cpu-gemv auto: no C compiler to build the row kernel, so every product goes through sgemm"
    try:
        shim = gemv_shim.load(gemv_shim.build(cc), openblas)
    except (OSError, AttributeError) as exc:
        return None, f"cpu-gemv auto: every product through sgemm (the row kernel failed: {exc})"
    return shim, (f"cpu-gemv auto: products of up to {gemv_shim.MAX_ROWS} rows through mlxd's row kernel on "
                  f"{shim.threads()} threads ({shim.path})")


def check(mode: str) -> None:
    """What ``preload`` would refuse for ``mode``, decided without loading anything (``mlxd config check``)."""
    if mode not in MODES:
        raise _unknown(mode)
    if mode in ("system", "packaged") and sys.platform == "linux" and not _has_cuda_backend():
        if (find_openblas() if mode == "system" else find_packaged()) is None:
            raise _missing(mode)


def _unknown(mode: str) -> EngineError:
    return EngineError(f"cpu-blas: unknown mode {mode!r}; choose {', '.join(MODES[:-1])} or {MODES[-1]}")


def _missing(mode: str) -> EngineError:
    if mode == "system":
        return EngineError(
            "cpu-blas system: no OpenBLAS library found (install libopenblas0-pthread or use --cpu-blas auto)"
        )
    return EngineError(
        f"cpu-blas packaged: the {PACKAGED_DIST} package is not installed (pip install {PACKAGED_DIST}; it has "
        "wheels for Linux x86_64 only) or use --cpu-blas auto"
    )


def _thread_timeout() -> int | None:
    """OPENBLAS_THREAD_TIMEOUT as OpenBLAS reads it (a positive integer, clamped to 4..30), or None where OpenBLAS
    keeps its default."""
    try:
        value = int(os.environ["OPENBLAS_THREAD_TIMEOUT"])
    except (KeyError, ValueError):
        return None
    return min(30, max(4, value)) if value > 0 else None


def _has_cuda_backend() -> bool:
    for dist in ("mlx-cuda", "mlx-cuda-12", "mlx-cuda-13"):
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return True
    return False

"""Which OpenBLAS was loaded and which kernels it picked for this CPU, and the warning when they are generic.

OpenBLAS built with DYNAMIC_ARCH picks its kernels for the CPU it finds, and falls back to generic SSE3 ones
("Prescott") for a CPU its version does not know: Debian 12's 0.3.21 does so on Sapphire Rapids, where matrix
products then run 2 to 3 times slower than with the AVX-512 kernels (docs/benchmarks.md). The library reports
itself through ``openblas_get_config`` and ``openblas_get_corename``. This module must not import mlx.
"""

from __future__ import annotations

import ctypes
import platform
from dataclasses import dataclass

# OpenBLAS's x86_64 kernels that use AVX2 or AVX-512 (Zen runs the Haswell ones); the rest are generic there.
WIDE_KERNELS = frozenset({"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"})


@dataclass(frozen=True)
class Kernel:
    """What a loaded OpenBLAS says of itself: its version, the kernels (corename) and its build configuration."""

    version: str | None
    corename: str | None
    config: str | None

    def describe(self) -> str:
        version = f"OpenBLAS {self.version}" if self.version else "OpenBLAS"
        return f"{version}, {self.corename} kernels" if self.corename else version


def identify(library: ctypes.CDLL) -> Kernel:
    """Ask a loaded OpenBLAS for its version and kernels (None for what it does not export)."""
    config, corename = _text(library, "openblas_get_config"), _text(library, "openblas_get_corename")
    words = (config or "").split()
    version = words[1] if len(words) > 1 and words[0] == "OpenBLAS" else None
    return Kernel(version, corename, config)


def _text(library: ctypes.CDLL, name: str) -> str | None:
    try:
        function = getattr(library, name)
    except AttributeError:
        return None
    function.restype = ctypes.c_char_p
    function.argtypes = []
    value = function()
    return value.decode(errors="replace").strip() if isinstance(value, bytes) else None


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first CPU in /proc/cpuinfo's text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def read_cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return cpu_flags(f.read())
    except OSError:
        return frozenset()


def cpu_identity() -> str:
    """What a build for "this CPU" (``-march=native``) depends on: its model and feature flags, for cache keys (a
    cache directory may be shared by machines)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n\n")[0].splitlines()
    except OSError:
        return platform.processor()
    return "\n".join(line for line in lines if line.split(":")[0].strip() in ("model name", "flags", "Features"))


def generic_warning(kernel: Kernel, flags: frozenset[str], machine: str | None = None) -> str | None:
    """A warning, saying what to do, when OpenBLAS runs generic kernels on an x86_64 CPU with AVX2 or AVX-512."""
    if (machine or platform.machine()) not in ("x86_64", "AMD64") or kernel.corename is None:
        return None
    if "avx2" not in flags or kernel.corename.lower() in WIDE_KERNELS:
        return None
    wide = "AVX-512" if "avx512f" in flags else "AVX2"
    coretype = "SkylakeX" if wide == "AVX-512" else "Haswell"
    return (
        f"cpu-blas: {kernel.describe()} on a CPU with {wide}: this OpenBLAS does not know the CPU and fell back "
        f"to generic kernels, so matrix products run several times slower. Set OPENBLAS_CORETYPE={coretype} in "
        f"mlxd's environment, install a newer OpenBLAS, or install mlxd's packaged one (pip install "
        f"ngsolve-openblas) and use --cpu-blas auto or packaged"
    )

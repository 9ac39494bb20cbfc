"""Products of a few rows through mlxd's own kernel: a ``cblas_sgemm`` in front of OpenBLAS's.

mlx's CPU backend calls ``cblas_sgemm`` for every float32 product, and a decode step's are products of one row per
sequence by each weight matrix. OpenBLAS's sgemm packs the whole weight matrix into its buffers before it
multiplies, whatever the row count: on a 180M-parameter model (float32, 2 vCPUs, Sapphire Rapids), a step's
matrix products cost it 70-85 ms for one row and 80-100 ms for eight, where streaming the weights once costs 35.

So mlxd puts a ``cblas_sgemm`` of its own in front (gemv_shim.c, beside this file): a product of 1 to ``MAX_ROWS``
rows (row-major, A as is and the matrix transposed: mlx's layout for ``x @ W.T``) by a matrix of at least
``MIN_ELEMENTS`` goes to a kernel that reads each matrix row once for all the rows, on as many threads as OpenBLAS
uses; another one-row product goes to OpenBLAS's ``cblas_sgemv``; every other one to OpenBLAS's sgemm unchanged.
The kernel sums every element in one order whatever the batch, so a sequence's logits do not depend on the
sequences decoded beside it. (OpenBLAS can forward one-row products to sgemv itself, its ``GEMM_GEMV_FORWARD``
build option, but the x86_64 builds on the package index and in Debian do not, and nothing there streams a few
rows.)

It is compiled on the machine by its C compiler (the one mlx's CPU ``compile`` uses for its fused kernels), for
that CPU, into mlxd's cache directory once per source, compiler and CPU. It is loaded into the global scope before
OpenBLAS's names are, so that mlx's ``cblas_sgemm`` resolves to it; OpenBLAS's own two functions are handed to it
by address. Without a compiler nothing changes (the startup log says so). This module must not import mlx.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlxd.engine.cpu.blas_kernel import cpu_identity

# The smallest matrix (rows x columns of op(B)) whose products the front takes: 1 MiB of float32. Below it the
# matrix fits in cache, sgemm's packing costs little and OpenBLAS's small-matrix path is as fast; sending the many
# small products of attention (one per row and head) to sgemv instead cost the tiny fixture a quarter of its
# 32-stream throughput (docs/benchmarks.md, section 9). Read when the front is loaded.
MIN_ELEMENTS = 2**18

# The most rows the kernel takes (gemv_shim.c has room for 32). On the 180M model's matrices it costs 36 ms for one
# row, 42 for 8, 59 for 16 and 156 for 32, against sgemm's 76, 89, 123 and 173; from about 40 rows sgemm's packing
# pays for itself (docs/benchmarks.md, section 9).
MAX_ROWS = 32

# How long a helper thread spins for the next product before it sleeps: about OpenBLAS's own 2^20 cycles
# (mlxd.engine.cpu.blas.THREAD_TIMEOUT), which covers the gaps between one decode step's products.
SPIN_NS = 300_000

SOURCE = (Path(__file__).parent / "gemv_shim.c").read_text()

# Built for the CPU it runs on; without the flag where the compiler does not know it.
_FLAGS = (["-O3", "-march=native"], ["-O3"])


@dataclass(frozen=True)
class Shim:
    """The loaded front: its handle (for its counts) and the library's path."""

    handle: ctypes.CDLL
    path: Path

    def _count(self, name: str) -> int:
        count = getattr(self.handle, name)
        count.restype = ctypes.c_long
        return int(count())

    def rows(self) -> int:
        """How many products went to the row kernel so far (for tests and benchmarks)."""
        return self._count("mlxd_front_rows")

    def sgemv(self) -> int:
        """How many one-row products went to OpenBLAS's sgemv so far."""
        return self._count("mlxd_front_sgemv")

    def forwarded(self) -> int:
        """How many products the front took from sgemm so far."""
        return self.rows() + self.sgemv()

    def threads(self) -> int:
        """How many threads the row kernel runs on."""
        return self._count("mlxd_front_threads")


def compiler() -> str | None:
    """The C compiler to build the shim with: ``$CC``, else cc, gcc or clang on the PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            found = shutil.which(name.split()[0])
            if found:
                return found
    return None


def cache_dir() -> Path:
    """mlxd's cache directory (``$XDG_CACHE_HOME/mlxd``, else ``~/.cache/mlxd``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlxd"


def build(cc: str, where: Path | None = None, *, source: str = SOURCE) -> Path:
    """The shim compiled by ``cc`` (from ``source``: another version of it, for benchmarks), reused from ``where``
    (mlxd's cache directory) when already built there.

    Raises OSError when the compiler fails or the directory cannot be written."""
    key = hashlib.sha256("\0".join((source, cc, platform.machine(), cpu_identity())).encode()).hexdigest()[:16]
    target = (where or cache_dir()) / f"gemv-shim-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlxd-gemv-", dir=target.parent) as tmp:
        written = Path(tmp) / "gemv_shim.c"
        written.write_text(source)
        built = Path(tmp) / target.name
        _compile(cc, written, built)
        os.replace(built, target)  # atomic: a daemon starting beside this one sees all of it or nothing
    return target


def _compile(cc: str, source: Path, built: Path) -> None:
    error = ""
    for flags in _FLAGS:
        try:
            subprocess.run([cc, *flags, "-shared", "-fPIC", "-pthread", "-o", str(built), str(source)], check=True,
                           capture_output=True, text=True, timeout=120)
            return
        except subprocess.CalledProcessError as exc:
            error = exc.stderr.strip()[-300:]
        except subprocess.TimeoutExpired as exc:
            raise OSError(f"{cc} took more than {exc.timeout:.0f} s") from exc
    raise OSError(f"{cc} failed: {error}")


def load(path: Path, openblas: ctypes.CDLL) -> Shim:
    """Load the shim into the global scope and hand it OpenBLAS's sgemm and sgemv.

    ``openblas`` must have been loaded with ``RTLD_LOCAL`` (its names not yet global): the caller makes them global
    afterwards, so that the shim's ``cblas_sgemm`` comes first in the global lookup order."""
    handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    sgemm = ctypes.cast(openblas.cblas_sgemm, ctypes.c_void_p)
    sgemv = ctypes.cast(openblas.cblas_sgemv, ctypes.c_void_p)
    threads = openblas.openblas_get_num_threads
    threads.restype = ctypes.c_int
    init = handle.mlxd_front_init
    init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    init.restype = None
    init(sgemm, sgemv, MIN_ELEMENTS, MAX_ROWS, max(1, int(threads())), SPIN_NS)
    return Shim(handle, path)

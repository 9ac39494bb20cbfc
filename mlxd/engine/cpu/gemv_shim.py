"""One-row matrix products through OpenBLAS's matrix-vector kernel: a ``cblas_sgemm`` in front of OpenBLAS's.

mlx's CPU backend calls ``cblas_sgemm`` for every float32 product, a decode step's one-row ones included, and
OpenBLAS's sgemm packs the whole weight matrix into its buffers before it multiplies, whatever the row count: a
1x1024 row by a 1024x2816 matrix costs 1.3 to 2.3 ms through sgemm and 0.5 ms through ``cblas_sgemv`` (OpenBLAS
0.3.33, one thread, Sapphire Rapids), and a 180M-parameter model decodes 2 to 2.3 times faster with its one-row
products sent to sgemv, with the same greedy tokens (docs/benchmarks.md, section 9). OpenBLAS can forward such
products itself (its ``GEMM_GEMV_FORWARD`` build option), but the x86_64 builds on the package index and in
Debian do not.

So mlxd puts a ``cblas_sgemm`` of its own in front: a product of one row (M = 1, row-major, mlx's only layout) by
a matrix of at least ``MIN_ELEMENTS`` goes to ``cblas_sgemv``, every other one to OpenBLAS's ``cblas_sgemm``
unchanged. It is a few lines of C, compiled
on the machine by its C compiler (the one mlx's CPU ``compile`` uses for its fused kernels), into mlxd's cache
directory once per source, compiler and machine. It is loaded into the global scope before OpenBLAS's names are,
so that mlx's ``cblas_sgemm`` resolves to it; OpenBLAS's own two functions are handed to it by address. Without a
compiler nothing changes (the startup log says so). This module must not import mlx.
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

# The smallest matrix (rows x columns of op(B)) whose one-row products go to sgemv: 1 MiB of float32. Below it the
# matrix fits in cache, sgemm's packing costs little and OpenBLAS's small-matrix path is as fast as sgemv; sending the
# many small products of attention (one per row and head) to sgemv instead cost the tiny fixture a quarter of its
# 32-stream throughput (docs/benchmarks.md, section 9). Read when the front is loaded.
MIN_ELEMENTS = 2**18

SOURCE = r"""
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
static sgemm_fn real_sgemm;
static sgemv_fn real_sgemv;
static long forwarded;
static long min_elements;

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

void mlxd_gemv_shim_init(sgemm_fn sgemm, sgemv_fn sgemv, long min_matrix) {
    real_sgemm = sgemm;
    real_sgemv = sgemv;
    min_elements = min_matrix;
}

long mlxd_gemv_shim_forwarded(void) { return forwarded; }

/* C[1, N] = alpha * op(A)[1, K] op(B)[K, N] + beta * C as y = alpha * op(B)^T x + beta * y. */
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    if (order == ROW_MAJOR && m == 1 && k > 0 && n > 0 && (long)n * k >= min_elements) {
        int inc_x = trans_a == NO_TRANS ? 1 : lda;
        forwarded++;
        if (trans_b == NO_TRANS)
            real_sgemv(ROW_MAJOR, TRANS, k, n, alpha, b, ldb, a, inc_x, beta, c, 1);
        else
            real_sgemv(ROW_MAJOR, NO_TRANS, n, k, alpha, b, ldb, a, inc_x, beta, c, 1);
        return;
    }
    real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
"""


@dataclass(frozen=True)
class Shim:
    """The loaded front: its handle (for the forwarded count) and the library's path."""

    handle: ctypes.CDLL
    path: Path

    def forwarded(self) -> int:
        """How many products went to sgemv so far (for tests and benchmarks)."""
        count = self.handle.mlxd_gemv_shim_forwarded
        count.restype = ctypes.c_long
        return int(count())


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


def build(cc: str, where: Path | None = None) -> Path:
    """The shim compiled by ``cc``, reused from ``where`` (mlxd's cache directory) when already built there.

    Raises OSError when the compiler fails or the directory cannot be written."""
    key = hashlib.sha256("\0".join((SOURCE, cc, platform.machine())).encode()).hexdigest()[:16]
    target = (where or cache_dir()) / f"gemv-shim-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlxd-gemv-", dir=target.parent) as tmp:
        source = Path(tmp) / "gemv_shim.c"
        source.write_text(SOURCE)
        built = Path(tmp) / target.name
        try:
            subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(built), str(source)], check=True,
                           capture_output=True, text=True, timeout=120)
        except subprocess.CalledProcessError as exc:
            raise OSError(f"{cc} failed: {exc.stderr.strip()[-300:]}") from exc
        except subprocess.TimeoutExpired as exc:
            raise OSError(f"{cc} took more than {exc.timeout:.0f} s") from exc
        os.replace(built, target)  # atomic: a daemon starting beside this one sees all of it or nothing
    return target


def load(path: Path, openblas: ctypes.CDLL) -> Shim:
    """Load the shim into the global scope and hand it OpenBLAS's sgemm and sgemv.

    ``openblas`` must have been loaded with ``RTLD_LOCAL`` (its names not yet global): the caller makes them global
    afterwards, so that the shim's ``cblas_sgemm`` comes first in the global lookup order."""
    handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    sgemm = ctypes.cast(openblas.cblas_sgemm, ctypes.c_void_p)
    sgemv = ctypes.cast(openblas.cblas_sgemv, ctypes.c_void_p)
    init = handle.mlxd_gemv_shim_init
    init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    init.restype = None
    init(sgemm, sgemv, MIN_ELEMENTS)
    return Shim(handle, path)

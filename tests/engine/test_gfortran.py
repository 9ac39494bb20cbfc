"""The Fortran runtime for the packaged OpenBLAS, from mlx-cpu's renamed copy, where the system has none."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mlxd.engine.cpu import blas_libs

from mlxd.engine.cpu import gfortran

RUNTIME = gfortran.bundled_runtime()
needs_runtime = pytest.mark.skipif(RUNTIME is None, reason="mlx-cpu carries no libgfortran here (not Linux)")


@needs_runtime
def test_a_copy_of_mlx_cpus_libgfortran_answers_to_libgfortran_so_5() -> None:
    assert RUNTIME is not None
    original = RUNTIME[0].read_bytes()
    image = bytearray(original)

    gfortran.set_soname(image, gfortran.SONAME)

    assert gfortran.soname(original) not in (None, gfortran.SONAME)  # auditwheel's name, which no loader matches
    assert gfortran.soname(image) == gfortran.SONAME
    assert len(image) == len(original)
    assert sum(a != b for a, b in zip(image, original)) <= 8  # one offset in the dynamic section


@needs_runtime
def test_a_name_the_string_table_lacks_is_refused() -> None:
    assert RUNTIME is not None
    with pytest.raises(OSError, match="holds no 'libnothing.so.9'"):
        gfortran.set_soname(bytearray(RUNTIME[0].read_bytes()), b"libnothing.so.9")
    with pytest.raises(OSError, match="not a 64-bit little-endian ELF"):
        gfortran.set_soname(bytearray(b"#!/bin/sh\n" * 8), gfortran.SONAME)


@needs_runtime
@pytest.mark.skipif(blas_libs.find_packaged() is None, reason="ngsolve-openblas is not installed (Linux x86_64 only)")
def test_the_packaged_openblas_runs_on_the_provided_runtime() -> None:
    """Once provided, the copy is what the packaged OpenBLAS's dependency resolves to, even where the system has
    a libgfortran.so.5 of its own, and mlx's matmul gives the right result on it."""
    code = textwrap.dedent(
        """
        import ctypes
        from mlxd.engine.cpu import blas_libs
        from mlxd.engine.cpu import gfortran
        gfortran.provide()
        ctypes.CDLL(blas_libs.find_packaged(), mode=ctypes.RTLD_GLOBAL)
        import mlx.core as mx
        a = mx.arange(12, dtype=mx.float32).reshape(3, 4)
        print((a @ a.T).tolist())
        maps = open("/proc/self/maps").read().splitlines()
        print(sorted({m.split()[-1].rsplit("/", 1)[-1] for m in maps if "gfortran" in m}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stderr
    product, loaded = result.stdout.splitlines()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert json.loads(product) == (a @ a.T).tolist()
    # mlx-cpu's original and the deleted copy; never the system's libgfortran.so.5.0.0
    assert RUNTIME is not None and RUNTIME[0].name in loaded
    assert "libgfortran.so.5.0.0" not in loaded and "(deleted)" in loaded

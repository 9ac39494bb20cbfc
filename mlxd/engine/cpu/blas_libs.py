"""The OpenBLAS libraries ``--cpu-blas`` can load, their versions, and which one ``auto`` takes.

Two sources: the system's (a distribution package such as Debian's libopenblas0-pthread) and the packaged one, the
``ngsolve-openblas`` wheel that mlxd depends on for Linux x86_64. Why that wheel, of those on the package index:

- ``scipy-openblas32`` and ``scipy-openblas64`` (NumPy's and SciPy's own, the newest) export every name with a
  ``scipy_`` prefix (``scipy_cblas_sgemm``), and mlx calls ``cblas_sgemm``: using them needs a compiled shim,
  which a pure-Python package cannot ship.
- ``cmeel-openblas`` exports the plain names but is built for one CPU: its config reads ``SKYLAKEX
  MAX_THREADS=4`` with no ``DYNAMIC_ARCH``, so it would fault on a CPU without AVX-512 and never uses more than 4
  threads.
- ``ngsolve-openblas`` exports the plain names (``cblas_*``, LAPACK, ``openblas_get_*``), is built with
  ``DYNAMIC_ARCH`` and ``MAX_THREADS=128``, and picks current kernels (Cooperlake on a Sapphire Rapids Xeon, where
  Debian's 0.3.21 falls back to Prescott). It needs ``libgfortran.so.5``, which mlxd provides where the system
  has none (mlxd.engine.cpu.gfortran). There is no aarch64 wheel: there ``auto`` takes the system library, as before.

``auto`` takes the packaged library unless the system's is newer: a distribution that ships a newer OpenBLAS knows
at least the CPUs the wheel knows, while an older one may not know the machine it runs on (Debian 12's 0.3.21 does
not know Sapphire Rapids). This module must not import mlx.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PACKAGED_DIST = "ngsolve-openblas"
_PACKAGED_MODULE = "ngsolve_openblas"

Source = Literal["system", "packaged"]
Version = tuple[int, ...]

# Debian/Ubuntu (pthread and openmp variants, then the alternatives link), Fedora/RHEL, Arch, Alpine.
_SYSTEM_CANDIDATES = (
    "/usr/lib/{arch}-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
    "/usr/lib/libopenblas.so",
)

# OpenBLAS names its library file by version (libopenblasp-r0.3.21.so) and holds "OpenBLAS 0.3.21" in its
# get_config string.
_FILE_VERSION = re.compile(r"-r(\d+(?:\.\d+)+)\.so")
_CONFIG_VERSION = re.compile(rb"OpenBLAS (\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class Library:
    source: Source
    path: str
    version: Version | None  # None where neither its file name nor its contents say


def find_openblas() -> str | None:
    """The path of the system's OpenBLAS shared library, or None."""
    arch = platform.machine()
    for pattern in _SYSTEM_CANDIDATES:
        path = pattern.format(arch=arch)
        if os.path.exists(path):
            return path
    return ctypes.util.find_library("openblas")  # a soname the dynamic loader resolves, or None


def find_packaged() -> str | None:
    """The path of the packaged OpenBLAS (the ngsolve-openblas wheel), or None where it is not installed."""
    # find_spec locates the package without running its __init__, which would load the library on import.
    spec = importlib.util.find_spec(_PACKAGED_MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("libopenblas*.so*"))
        if found:
            return str(found[0])
    return None


def system_library() -> Library | None:
    path = find_openblas()
    return None if path is None else Library("system", path, version_of(path))


def packaged_library() -> Library | None:
    path = find_packaged()
    return None if path is None else Library("packaged", path, version_of(path))


def version_of(path: str) -> Version | None:
    """An OpenBLAS library's version, from its file name (following links) or else its config string."""
    real = os.path.realpath(path)
    match = _FILE_VERSION.search(os.path.basename(real))
    if match:
        return parse_version(match.group(1))
    try:
        with open(real, "rb") as f:
            tail = b""
            while chunk := f.read(1 << 20):
                found = _CONFIG_VERSION.search(tail + chunk)
                if found:
                    return parse_version(found.group(1).decode())
                tail = chunk[-32:]  # a match may straddle two chunks
    except OSError:
        return None
    return None


def parse_version(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def show(version: Version | None) -> str:
    return "(version unknown)" if version is None else ".".join(map(str, version))


def choose(system: Library | None, packaged: Library | None) -> tuple[Library | None, str]:
    """What ``auto`` loads, and why: the packaged library unless the system's is newer."""
    if packaged is None and system is None:
        return None, ("no OpenBLAS found (neither the ngsolve-openblas package nor a system library), so float32 "
                      "products run some 30 times slower: reinstall mlxd with its dependencies, or install "
                      "libopenblas0-pthread (Debian/Ubuntu) or openblas (Fedora, Arch)")
    if packaged is None:
        return system, f"the system's OpenBLAS {show(system.version if system else None)}; ngsolve-openblas is " \
                       "not installed"
    if system is None:
        return packaged, f"the packaged OpenBLAS {show(packaged.version)}; no system OpenBLAS"
    if system.version is not None and packaged.version is not None and system.version > packaged.version:
        return system, f"the system's OpenBLAS {show(system.version)} is newer than the packaged " \
                       f"{show(packaged.version)}"
    return packaged, f"the packaged OpenBLAS {show(packaged.version)} over the system's {show(system.version)}"

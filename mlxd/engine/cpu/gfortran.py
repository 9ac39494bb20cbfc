"""The GNU Fortran runtime (``libgfortran.so.5``) for the OpenBLAS from the package index, where the system has none.

OpenBLAS's LAPACK is Fortran, so the Linux OpenBLAS wheels that export the unprefixed names mlx calls link
``libgfortran.so.5``, and no wheel on the package index provides a library of that name. mlx's own CPU wheel
(``mlx-cpu``) carries one, for its reference LAPACK, but auditwheel renamed it (``libgfortran-<hash>.so.5.0.0``, and
that name is its SONAME), so the dynamic loader cannot match it to a dependency on ``libgfortran.so.5``. A copy
whose SONAME reads ``libgfortran.so.5`` again can be matched once it is loaded: the library's string table still
holds that name (its version definition's base entry), so the copy differs from the original in one 8-byte offset,
what ``patchelf --set-soname`` does when the new name is already there. The copy lives in a private temporary
directory only while it is loaded: the mapping outlives the file. This module must not import mlx.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import struct
import tempfile
from pathlib import Path

SONAME = b"libgfortran.so.5"

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_STRSZ, _DT_SONAME = 0, 5, 10, 14


def bundled_runtime() -> tuple[Path, Path | None] | None:
    """mlx-cpu's renamed libgfortran and the libquadmath it needs (None where that wheel carries none)."""
    try:
        libs = Path(str(importlib.metadata.distribution("mlx-cpu").locate_file("mlx_cpu.libs")))
    except importlib.metadata.PackageNotFoundError:
        return None
    gfortran = sorted(libs.glob("libgfortran*.so*"))
    quadmath = sorted(libs.glob("libquadmath*.so*"))
    return (gfortran[0], quadmath[0] if quadmath else None) if gfortran else None


def provide() -> Path:
    """Load a copy of mlx-cpu's libgfortran that the loader matches to ``libgfortran.so.5``; returns the original.

    Raises OSError when mlx-cpu carries no libgfortran or the copy cannot be made or loaded.
    """
    found = bundled_runtime()
    if found is None:
        raise OSError("mlx-cpu carries no libgfortran")
    gfortran, quadmath = found
    if quadmath is not None:
        # The copy's own dependency, matched by the SONAME this original keeps.
        ctypes.CDLL(str(quadmath), mode=ctypes.RTLD_GLOBAL)
    image = bytearray(gfortran.read_bytes())
    set_soname(image, SONAME)
    with tempfile.TemporaryDirectory(prefix="mlxd-gfortran-") as tmp:
        copy = Path(tmp) / SONAME.decode()
        copy.write_bytes(image)
        ctypes.CDLL(str(copy), mode=ctypes.RTLD_GLOBAL)
    return gfortran


def soname(image: bytes | bytearray) -> bytes | None:
    """The SONAME of a 64-bit little-endian ELF shared library, or None where it has none."""
    dynamic, strtab, _ = _dynamic(image)
    for offset, tag, value in dynamic:
        if tag == _DT_SONAME:
            return bytes(image[strtab + value : image.index(b"\0", strtab + value)])
    return None


def set_soname(image: bytearray, name: bytes) -> None:
    """Point the SONAME of ``image`` at ``name``, which its string table must already hold; raises OSError."""
    dynamic, strtab, size = _dynamic(image)
    at = image.find(b"\0" + name + b"\0", strtab, strtab + size)
    if at < 0:
        raise OSError(f"the string table holds no {name.decode()!r}")
    for offset, tag, _ in dynamic:
        if tag == _DT_SONAME:
            struct.pack_into("<Q", image, offset + 8, at + 1 - strtab)
            return
    raise OSError("the library has no SONAME")


def _dynamic(image: bytes | bytearray) -> tuple[list[tuple[int, int, int]], int, int]:
    """The dynamic section's entries (file offset, tag, value), the string table's file offset and its size."""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise OSError("not a 64-bit little-endian ELF file")
    phoff = struct.unpack_from("<Q", image, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
    headers = [struct.unpack_from("<IIQQQQQQ", image, phoff + i * phentsize) for i in range(phnum)]
    loads = [(h[3], h[2], h[5]) for h in headers if h[0] == _PT_LOAD]  # (vaddr, file offset, file size)
    dynamics = [h[2] for h in headers if h[0] == _PT_DYNAMIC]
    if not dynamics:
        raise OSError("no dynamic section")
    entries, at = [], dynamics[0]
    while at + 16 <= len(image):
        tag, value = struct.unpack_from("<qQ", image, at)
        if tag == _DT_NULL:
            break
        entries.append((at, tag, value))
        at += 16
    values = {tag: value for _, tag, value in entries}
    if _DT_STRTAB not in values or _DT_STRSZ not in values:
        raise OSError("no dynamic string table")
    for vaddr, offset, size in loads:
        if vaddr <= values[_DT_STRTAB] < vaddr + size:
            return entries, values[_DT_STRTAB] - vaddr + offset, values[_DT_STRSZ]
    raise OSError("the dynamic string table lies outside the loaded segments")

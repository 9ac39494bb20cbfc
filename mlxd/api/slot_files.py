"""Slot save files: names validated as b10621 does, paths confined to ``--slot-save-path``, writes atomic."""

from __future__ import annotations

import os
import tempfile
import unicodedata
from pathlib import Path
from typing import Callable, TypeVar

from mlxd.errors import InvalidRequest

T = TypeVar("T")

_FORBIDDEN = set('/\\:*?"<>|')
_MAX_BYTES = 255


def valid_filename(name: str) -> bool:
    """A plain file name: no separators or reserved characters, no control characters, no dot-only names."""
    if not name or len(name.encode("utf-8", errors="surrogatepass")) > _MAX_BYTES:
        return False
    if name in (".", "..") or name.startswith(" ") or name.endswith((" ", ".")):
        return False
    for ch in name:
        if ch in _FORBIDDEN or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return False
    return True


def slot_file(directory: str | Path, filename: str) -> Path:
    """The path for ``filename`` inside ``directory``; anything that would leave it is an invalid filename."""
    if not valid_filename(filename):
        raise InvalidRequest("Invalid filename")
    root = Path(directory).resolve()
    path = (root / filename).resolve()
    if path.parent != root:
        raise InvalidRequest("Invalid filename")
    return path


def write_atomically(path: Path, write: Callable[[Path], T]) -> T:
    """Run ``write(tmp)`` on a temporary file beside ``path``, then rename it over ``path`` in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        result = write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return result
    finally:
        tmp.unlink(missing_ok=True)

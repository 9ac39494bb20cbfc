"""Slot save files: b10621's filename rules, confinement to the directory, atomic replacement."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.api.slot_files import slot_file, valid_filename, write_atomically
from mlxd.errors import InvalidRequest


@pytest.mark.parametrize("name", ["slot0.bin", "a b.bin", "café.kv", "x" * 255])
def test_plain_names_are_valid(name: str) -> None:
    assert valid_filename(name)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "a\\b", "c:d", "a*b", "a?b", 'a"b', "a<b", "a|b", "a\x00b", "a\nb",
             " lead", "trail ", "trail.", "x" * 256, "é" * 128],
)
def test_unsafe_names_are_refused(name: str, tmp_path: Path) -> None:
    assert not valid_filename(name)
    with pytest.raises(InvalidRequest, match="Invalid filename"):
        slot_file(tmp_path, name)


def test_symlinked_escape_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "slots"
    root.mkdir()
    (root / "link").symlink_to(outside / "target")
    with pytest.raises(InvalidRequest):
        slot_file(root, "link")


def test_writes_replace_atomically(tmp_path: Path) -> None:
    path = slot_file(tmp_path, "slot.bin")
    path.write_bytes(b"old")

    def fail(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_atomically(path, fail)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slot.bin"]

    assert write_atomically(path, lambda tmp: tmp.write_bytes(b"new")) == 3
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slot.bin"]

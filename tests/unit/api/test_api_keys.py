"""API keys: ``--api-key`` items and ``--api-key-file`` lines, compared in constant time; a bad file locks."""

from __future__ import annotations

from pathlib import Path

from mlxd.api.middleware import KeyRing, read_key_file
from mlxd.config import Config


def test_key_file_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# team A\nalpha\n\n  beta  \n#gamma\n")
    assert read_key_file(path) == ["alpha", "beta"]


def test_ring_accepts_exact_keys_only(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("from-file\n")
    ring = KeyRing(Config(api_key=["cli"], api_key_file=str(path)))
    assert ring.required
    assert ring.accepts("cli") and ring.accepts("from-file")
    assert not ring.accepts("cl") and not ring.accepts("cli ") and not ring.accepts("")


def test_no_keys_means_open() -> None:
    assert not KeyRing(Config()).required


def test_unreadable_key_file_locks_the_api(tmp_path: Path) -> None:
    ring = KeyRing(Config(api_key_file=str(tmp_path / "missing")))
    assert ring.required and not ring.accepts("")

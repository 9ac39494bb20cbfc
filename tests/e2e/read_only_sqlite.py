"""A daemon whose SQLite files open read-only, as on a read-only disk: root ignores file modes, so a chmod would not
do in a test, while SQLite's own read-only mode refuses writes for anyone."""

from __future__ import annotations

from pathlib import Path

# Loaded at the daemon's startup as sitecustomize (PYTHONPATH): every sqlite3.connect opens its file with mode=ro.
HOOK = '''
import sqlite3

_connect = sqlite3.connect


def _read_only(database, *args, **kwargs):
    kwargs["uri"] = True
    return _connect(f"file:{database}?mode=ro", *args, **kwargs)


sqlite3.connect = _read_only
'''


def read_only_sqlite_env(directory: Path) -> dict[str, str]:
    """The environment for ``launch``: writes the hook under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(HOOK)
    return {"PYTHONPATH": str(directory)}

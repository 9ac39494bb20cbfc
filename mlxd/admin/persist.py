"""``POST /v1/persist``: the admin overrides written into the --config TOML file, so they survive a restart.

The file is rewritten atomically (a temporary file in the same directory, fsync, rename) with its mode and owner;
temporary files that a killed persist left behind are removed at startup and before each persist.
Keys are written in their canonical names; other spellings of the same option are dropped so the file stays
unambiguous; an override to "unset" removes the key. Comments are not preserved (tomli-w writes plain TOML).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import tempfile
import time
import tomllib
from typing import Any

import tomli_w

from mlxd.config import table
from mlxd.errors import AdminError

log = logging.getLogger("mlxd.admin")


def merged_document(current: dict[str, Any], updates: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    """``current`` with each option in ``updates`` (canonical name -> typed value, None to remove) set once."""
    specs = table().by_key
    doc = dict(current)
    written: list[str] = []
    removed: list[str] = []
    for name, value in updates.items():
        for key in [k for k in doc if not isinstance(doc[k], dict) and k in specs and specs[k].name == name]:
            del doc[key]
        if value is None:
            removed.append(name)
        else:
            doc[name] = value
            written.append(name)
    return doc, written, removed


# A temporary file left by a write that never finished (the process was killed between create and rename) is
# removed once it is this old: younger ones may belong to a write in progress.
ORPHAN_AGE_S = 60.0


def _temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.mlxd-"


def _is_temp_of(name: str, path: str) -> bool:
    """A temporary file of a persist into ``path`` (or one of an older mlxd's, which named them .mlxd-*.toml)."""
    ours = name.startswith(_temp_prefix(path)) and name.endswith(".tmp")
    legacy = name.startswith(".mlxd-") and name.endswith(".toml") and len(name) == len(".mlxd-") + 8 + len(".toml")
    return ours or legacy


def clean_orphans(path: str, *, older_than: float = ORPHAN_AGE_S) -> list[str]:
    """Remove the temporary files that killed persists into ``path`` left next to it; the paths removed."""
    real = os.path.realpath(path)
    directory = os.path.dirname(real) or "."
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        if not _is_temp_of(name, real):
            continue
        candidate = os.path.join(directory, name)
        try:
            st = os.lstat(candidate)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and now - st.st_mtime >= older_than:
                os.unlink(candidate)
                removed.append(candidate)
        except OSError:
            continue
    if removed:
        log.info("removed %d temporary file(s) left by an interrupted persist: %s", len(removed),
                 ", ".join(removed))
    return removed


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` with ``text``: same directory, same mode and owner, fsync before the rename."""
    st = os.stat(path)
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, st.st_mode & 0o7777)
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except PermissionError:
            pass  # not ours to give away; the mode is still kept
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _persist(path: str, updates: dict[str, Any]) -> dict[str, Any]:
    real = os.path.realpath(path)
    try:
        with open(real, "rb") as fh:
            current = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise AdminError("invalid_config_file", f"{path} is not valid TOML ({exc}); fix it first", 409) from exc
    except OSError as exc:
        raise AdminError("io_error", f"cannot read {path}: {exc.strerror}", 500) from exc
    doc, written, removed = merged_document(current, updates)
    clean_orphans(real)
    try:
        write_atomically(real, tomli_w.dumps(doc))
    except OSError as exc:
        raise AdminError("io_error", f"cannot write {path}: {exc.strerror}", 500) from exc
    return {"path": path, "written": written, "removed": removed}


async def persist_overrides(controller: Any, path: str) -> dict[str, Any]:
    """Write the overrides in force into ``path``, then drop from the admin layer those the file now sets."""
    specs = table().by_key
    resolved = controller.resolved
    updates: dict[str, Any] = {}
    for key in controller.overrides:
        spec = specs.get(key)
        if spec is not None and spec.name != "config":
            updates[spec.name] = resolved.value(spec.name)
    result = await asyncio.to_thread(_persist, path, updates)
    # An override the command line or environment would shadow in the file stays in the admin layer.
    trial = await controller.replace_overrides({}, dry_run=True)
    shadowed = set(trial.changed)
    keep = {k: v for k, v in controller.overrides.items() if k not in specs or specs[k].name in shadowed}
    await controller.replace_overrides(keep, trigger="admin:persist")
    result["kept"] = sorted(keep)
    return result

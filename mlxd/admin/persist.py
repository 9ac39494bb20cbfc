"""``POST /v1/persist``: the admin overrides written into the --config TOML file, so they survive a restart.

The file is rewritten atomically (a temporary file in the same directory, fsync, rename) with its mode and owner;
temporary files that a killed persist left behind are removed at startup and before each persist.
Keys are written in their canonical names; other spellings of the same option are dropped so the file stays
unambiguous; an override to "unset" removes the key. The file is the operator's document: it is edited in place
through tomlkit, so its comments, blank lines and key order stay; a key given in another spelling is renamed where
it stands, and a new key goes after the last top-level key, before the first table.
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

import tomlkit

from mlxd.config import table
from mlxd.errors import AdminError

log = logging.getLogger("mlxd.admin")


def merged_text(text: str, updates: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """The TOML ``text`` with each option in ``updates`` (canonical name -> typed value, None to remove) set once,
    everything else (comments, order, tables) as it was; returns (text, written, removed)."""
    specs = table().by_key
    doc = tomlkit.parse(text)
    written: list[str] = []
    removed: list[str] = []
    for name, value in updates.items():
        spelled = [k for k, v in doc.items() if not isinstance(v, dict) and k in specs and specs[k].name == name]
        for key in spelled[1:] if value is not None else spelled:
            doc.remove(key)
        if value is None:
            removed.append(name)
            continue
        if spelled and spelled[0] != name:
            # Renamed where it stands, with its comment; tomlkit's public API would move it to the end.
            doc._replace(spelled[0], name, value)
        elif spelled or (last := _last_key_index(doc)) is None or last + 1 == len(doc.body):
            doc[name] = value  # in place (its comment kept), at the end, or before the first table
        else:
            # After the last top-level key: tomlkit's own choice, just before the first table, would put it below
            # the comments that introduce that table.
            doc._insert_at(last + 1, name, value)
        written.append(name)
    return tomlkit.dumps(doc), written, removed


def _last_key_index(doc: tomlkit.TOMLDocument) -> int | None:
    """The position in ``doc``'s body of its last top-level key that is not a table, or None."""
    last = None
    for i, (key, item) in enumerate(doc.body):
        if key is not None and not isinstance(item, (tomlkit.items.Table, tomlkit.items.AoT)):
            last = i
    return last


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
            raw = fh.read()
        tomllib.loads(raw.decode("utf-8"))  # the same verdict as the configuration loader
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AdminError("invalid_config_file", f"{path} is not valid TOML ({exc}); fix it first", 409) from exc
    except OSError as exc:
        raise AdminError("io_error", f"cannot read {path}: {exc.strerror}", 500) from exc
    text, written, removed = merged_text(raw.decode("utf-8"), updates)
    clean_orphans(real)
    try:
        write_atomically(real, text)
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

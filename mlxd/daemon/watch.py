"""Watching the configuration files (TOML, presets INI) and turning edits into reloads."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Awaitable, Callable

log = logging.getLogger("mlxd.daemon.watch")

DEBOUNCE_MS = 200


async def watch_files(paths: list[str], on_change: Callable[[str], Awaitable[object]], stop: asyncio.Event) -> None:
    """Call ``on_change(path)`` after each settled edit of one of ``paths``.

    The parent directories are watched, not the files, because editors and config management replace a file by
    renaming a new one over it, which a watch on the old inode would miss.
    """
    from watchfiles import awatch

    targets = {Path(p).resolve() for p in paths}
    directories = sorted({str(t.parent) for t in targets if t.parent.is_dir()})
    if not directories:
        return
    log.info("watching %s for changes", ", ".join(str(t) for t in sorted(targets)))

    def interesting(_change: object, path: str) -> bool:
        return Path(path).resolve() in targets

    async for changes in awatch(*directories, watch_filter=interesting, debounce=DEBOUNCE_MS, step=50,
                                stop_event=stop, recursive=False):
        changed = sorted({path for _, path in changes})
        await on_change(", ".join(changed))

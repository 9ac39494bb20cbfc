"""Where the conversation store lives, and the path prefix of its routes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# The store's routes on the public listener (under --api-prefix). Router mode and idle sleep leave them alone: they
# name no model and never wake one (mlxd.api.router_mode, mlxd.daemon.sleep).
STORE_PREFIX = "/webui/"
DB_NAME = "webui.sqlite3"


def state_dir(option: str | None, env: Mapping[str, str]) -> Path:
    """``--state-dir``, else systemd's ``$STATE_DIRECTORY`` (its first entry), else ``$XDG_STATE_HOME/mlxd``, else
    ``~/.local/state/mlxd``."""
    if option:
        return Path(option).expanduser()
    systemd = env.get("STATE_DIRECTORY", "")
    if systemd:
        return Path(systemd.split(":")[0])
    xdg = env.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg else Path(env.get("HOME") or os.path.expanduser("~")) / ".local" / "state"
    return base / "mlxd"


def store_path(option: str | None, env: Mapping[str, str]) -> Path:
    """The SQLite file of the conversation store."""
    return state_dir(option, env) / DB_NAME

"""The chat page's default settings, ``--webui-config`` (JSON text) and ``--webui-config-file`` (a JSON file).

b10621 reads both when it starts and exposes them as ``/props``'s ``ui_settings``; the file's keys come first and
the inline JSON's override them. Here they are checked when a configuration is validated (a bad value is refused
before it serves) and read again per ``/props`` request, so a change is live.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def json_object_text(text: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or None when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_object_file(path: str) -> dict[str, Any] | None:
    """The JSON object in the file at ``path``, or None when it cannot be read or holds something else."""
    try:
        return json_object_text(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def ui_settings(webui_config: str | None, webui_config_file: str | None) -> dict[str, Any]:
    """``/props``'s ``ui_settings``: the file's object updated by the inline one (either may be unset)."""
    settings: dict[str, Any] = {}
    if webui_config_file:
        settings.update(json_object_file(webui_config_file) or {})
    if webui_config:
        settings.update(json_object_text(webui_config) or {})
    return settings

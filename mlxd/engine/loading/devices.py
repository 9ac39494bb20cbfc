"""The devices MLX can run on, described for ``--list-devices``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import mlx.core as mx

MIB = 1024 * 1024


@dataclass(frozen=True)
class DeviceInfo:
    """One MLX device: its name (``gpu``, ``cpu``), a description, and memory in bytes (free: 0 when unknown)."""

    name: str
    description: str
    total: int
    free: int


def available_devices() -> list[DeviceInfo]:
    """Every device MLX can use here, the default one (where mlxd runs models) first."""
    import mlx.core as mx

    kinds = [k for k in (mx.gpu, mx.cpu) if mx.is_available(k)]
    default = mx.default_device().type
    kinds.sort(key=lambda k: k != default)
    return [_describe(mx.Device(k), "gpu" if k == mx.gpu else "cpu") for k in kinds]


def _describe(device: mx.Device, name: str) -> DeviceInfo:
    import mlx.core as mx

    info = mx.device_info(device)
    words = [str(info[k]) for k in ("device_name", "architecture") if info.get(k)]
    description = f"{words[0]} ({', '.join(words[1:])})" if len(words) > 1 else (words[0] if words else name)
    if name == "cpu":  # unified with the host's memory
        total, free = _host_memory()
    else:
        total = int(info.get("memory_size") or info.get("total_memory") or 0)
        free = int(info.get("max_recommended_working_set_size") or 0)
    return DeviceInfo(name, description, total, free)


def _host_memory() -> tuple[int, int]:
    """Physical memory and what is available of it, in bytes (0 where the system does not say)."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0

"""``-ngl`` and ``-dev`` against the checkpoint and MLX's device, decided before any weight is read.

MLX runs a whole model on its default device: the GPU with Metal or CUDA, the CPU with mlx's CPU backend. In
llama.cpp's terms that is full offload (``-ngl`` at or above the layer count, ``auto``, ``all``, ``-1``) on a GPU,
and CPU-only (``-ngl 0``, ``-dev none``) on the CPU, so those values describe what mlxd does. A count between 1
and the layer count asks for some layers on each device, which MLX does not do; CPU-only asked of a GPU backend
is refused too rather than silently run on the GPU. The layer count comes from the checkpoint's config.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxd.errors import EngineError


@dataclass(frozen=True)
class Placement:
    """What ``-ngl``/``-dev`` ask for: every layer on the default device, or everything on the CPU."""

    cpu_only: bool
    layers: int | None  # the count given, None for auto/all/-1


def requested(n_gpu_layers: Any, device: Any) -> Placement:
    """The placement ``n_gpu_layers`` (auto, all, or a count) and ``device`` (None or ``none``) ask for."""
    devices = [d.strip().lower() for d in str(device).split(",")] if device else []
    text = str(n_gpu_layers).strip().lower()
    layers = None if text in ("auto", "all", "-1", "") else int(text)
    return Placement(cpu_only=layers == 0 or devices == ["none"], layers=layers)


def layer_count(path: Path) -> int | None:
    """``num_hidden_layers`` of the checkpoint at ``path`` (its text config for a multimodal one), or None."""
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        n = section.get("num_hidden_layers") if isinstance(section, dict) else None
        if isinstance(n, int):
            return n
    return None


def mlx_runs_on_gpu() -> bool:
    """Whether MLX's default device here is a GPU (Metal or CUDA)."""
    import mlx.core as mx

    return bool(mx.default_device().type == mx.gpu)


def check(path: Path, n_gpu_layers: Any, device: Any, *, on_gpu: bool | None = None, what: str = "model") -> str:
    """Refuse a placement MLX cannot give the checkpoint at ``path``; return a description of the one it gets.

    ``on_gpu`` defaults to MLX's own default device; ``what`` names the option set in messages (model or draft).
    """
    asked = requested(n_gpu_layers, device)
    gpu = mlx_runs_on_gpu() if on_gpu is None else on_gpu
    suffix = "-draft" if what == "draft" else ""
    if asked.cpu_only:
        if gpu:
            raise EngineError(f"n-gpu-layers{suffix}={n_gpu_layers}, device{suffix}={device}: not supported by mlxd: "
                              "CPU-only asked of a GPU backend, where MLX runs the whole model on the GPU; leave "
                              "-ngl at auto and -dev unset, or install mlx's CPU backend")
        return "CPU only (MLX runs on the CPU here)"
    if asked.layers is not None:
        n = layer_count(path)
        if n is not None and asked.layers < n:
            raise EngineError(f"n-gpu-layers{suffix}={asked.layers}: not supported by mlxd: partial GPU offload "
                              f"({asked.layers} of {n} layers) is a ggml feature; MLX keeps the whole model on one "
                              f"device; use -ngl {n} or more (or all, or auto) for the whole model, or -ngl 0 "
                              "where MLX runs on the CPU")
    return "every layer on the GPU" if gpu else "every layer on the CPU (MLX runs on the CPU here)"

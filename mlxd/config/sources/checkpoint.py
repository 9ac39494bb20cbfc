"""The checkpoint's own settings: the sampling defaults of its ``generation_config.json``.

b10621 takes a model's recommended sampling from its metadata when the options are not set; mlxd reads the MLX
checkpoint's ``generation_config.json`` the same way, as a layer just above the built-in defaults, so that
``config explain`` shows the value that is served, with provenance ``checkpoint:generation_config.json``. Only this
small JSON file is read (never weights): from the ``-m`` directory, or from the hub cache's snapshot of
``--hf-repo`` when it is there already (nothing is downloaded here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlxd.config.options import OptionTable
from mlxd.config.sources.base import Layer
from mlxd.config.values import BadValue, Setting, parse_native

FILE = "generation_config.json"
SOURCE = f"checkpoint:{FILE}"
# Option -> generation_config.json key (the keys mlx-lm and transformers write).
KEYS = {"temperature": "temperature", "top-k": "top_k", "top-p": "top_p"}


def checkpoint_dir(model: str | None, hf_repo: str | None, store_root: str | None) -> Path | None:
    """The directory a configuration's checkpoint is in, if it is on this machine (``--hf-repo`` wins, as b10621)."""
    if hf_repo:
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:  # the hub client is optional for a local-only install
            return None
        try:
            found = try_to_load_from_cache(hf_repo, "config.json", cache_dir=store_root)
        except ValueError:  # not a repository id (the refusal rules say why)
            return None
        return Path(found).parent if isinstance(found, str) else None
    if model and Path(model).is_dir():
        return Path(model)
    return None


class CheckpointSource:
    """The sampling defaults a checkpoint directory recommends; an absent or unreadable file is an empty layer."""

    def __init__(self, directory: Path | None, table: OptionTable) -> None:
        self.directory = directory
        self.table = table

    def read(self) -> Layer:
        layer = Layer("checkpoint")
        if self.directory is None:
            return layer
        try:
            data: Any = json.loads((self.directory / FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return layer  # a checkpoint need not have one; the loader reports a broken checkpoint
        if not isinstance(data, dict):
            return layer
        for option, key in KEYS.items():
            raw = data.get(key)
            if raw is None:
                continue
            spec = self.table.get(option)
            if spec.value_type.value == "int" and isinstance(raw, float) and raw.is_integer():
                raw = int(raw)
            try:
                layer.settings[option] = Setting(parse_native(spec, raw), SOURCE)
            except BadValue as exc:
                layer.warnings.append(f"{self.directory / FILE}: {key} = {raw!r} is not used: {exc}")
        return layer

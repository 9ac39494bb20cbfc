"""The checkpoint's own settings: the sampling defaults of its ``generation_config.json`` and its context length.

b10621 takes a model's recommended sampling from its metadata when the options are not set, and `-c 0` means the
context the model was trained with; mlxd reads the MLX checkpoint's ``generation_config.json`` and ``config.json``
the same way, as a layer just above the built-in defaults, so that ``config explain`` shows the value that is
served, with provenance ``checkpoint:generation_config.json`` or ``checkpoint:config.json``. Only these small JSON
files are read (never weights): from the ``-m`` directory, or from the hub cache's snapshot of ``--hf-repo`` when it
is there already (nothing is downloaded here).
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
CONFIG = "config.json"
# The keys holding a checkpoint's training context, in the order the loader reads them (engine.loading.loader).
CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "n_positions", "seq_length")
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
        self._context(layer)
        data = _json(self.directory / FILE)  # a checkpoint need not have one; the loader reports a broken one
        if data is None:
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

    def _context(self, layer: Layer) -> None:
        """``ctx-size`` as `-c 0` resolves it: the training context of the checkpoint's text model."""
        assert self.directory is not None
        config = _json(self.directory / CONFIG)
        if config is None:
            return
        text = config.get("text_config")
        text = text if isinstance(text, dict) else config
        for key in CONTEXT_KEYS:
            value = text.get(key) or config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                layer.settings["ctx-size"] = Setting(value, f"checkpoint:{CONFIG}")
                return


def _json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is absent or unreadable."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None

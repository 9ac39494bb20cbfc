"""Which media a checkpoint takes, read from its config.json before anything is loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Modalities:
    """The input kinds a checkpoint's own config declares (a vision or an audio tower), text always."""

    vision: bool = False
    audio: bool = False

    @property
    def multimodal(self) -> bool:
        return self.vision or self.audio

    def names(self) -> list[str]:
        return [name for name, on in (("vision", self.vision), ("audio", self.audio)) if on]


TEXT_ONLY = Modalities()


def modalities(path: Path) -> Modalities:
    """A checkpoint is multimodal when its config.json has a vision or audio config (as mlx-vlm's models read)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return TEXT_ONLY
    if not isinstance(config, dict):
        return TEXT_ONLY
    return Modalities(vision=isinstance(config.get("vision_config"), dict),
                      audio=isinstance(config.get("audio_config"), dict))

"""Images and audio through mlx-vlm: detection, loading, media prompts and the multimodal worker.

Only ``detect`` imports nothing of mlx-vlm; the rest needs the ``mlxd[multimodal]`` extra.
"""

from mlxd.engine.vlm.detect import TEXT_ONLY, Modalities, modalities

__all__ = ["TEXT_ONLY", "Modalities", "modalities"]

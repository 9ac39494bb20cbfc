"""Loading a multimodal checkpoint: mlx-vlm's model and processor, mlx-lm's tokenizer over the same files.

The scheduler, sampling chain, stop handling and detokenizer see the same ``LoadedModel`` as for a text
checkpoint; the language model is wrapped in a ``TextView`` and the parts only media prompts need (the whole
model, its processor, the modalities) ride along in ``media``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxd.engine.loading.loader import LoadedModel, _check_local, _describe, checkpoint_facts
from mlxd.engine.vlm.detect import Modalities, modalities
from mlxd.errors import EngineError


@dataclass(frozen=True)
class MediaModel:
    """What a media prompt needs beyond the language model: the mlx-vlm model and its processor."""

    vlm: Any  # mlx_vlm's Model (vision tower, audio tower, projector, language model)
    processor: Any  # its processor (image processor, feature extractor, tokenizer)
    modalities: Modalities
    model_type: str


@dataclass(frozen=True)
class MultimodalModel(LoadedModel):
    """A loaded multimodal checkpoint; ``model`` is its language model behind a ``TextView``."""

    media: MediaModel | None = field(default=None, repr=False)


def load_multimodal(path: Path, *, name: str | None = None, image_min_tokens: int | None = None,
                    image_max_tokens: int | None = None) -> MultimodalModel:
    """Load the checkpoint at ``path`` through mlx-vlm; every failure is one ``EngineError``.

    ``image_min_tokens`` / ``image_max_tokens`` (``--image-min-tokens``, ``--image-max-tokens``) bound the tokens
    of one image for processors that resize to a pixel budget (Qwen-VL's); others refuse them.
    """
    from mlx.utils import tree_reduce
    from mlx_lm.utils import load_tokenizer

    from mlxd.engine.vlm.text_view import TextView

    path = Path(path)
    _check_local(path)
    kinds = modalities(path)
    try:
        from mlx_vlm.utils import load as vlm_load
    except ImportError as exc:
        raise EngineError(f"model {path}: a multimodal checkpoint ({', '.join(kinds.names())}) needs mlx-vlm: "
                          "install mlxd[multimodal], or serve it as text only with --no-mmproj") from exc
    try:
        vlm, processor = vlm_load(str(path))
        config = json.loads((path / "config.json").read_text())
        tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    except FileNotFoundError as exc:
        raise EngineError(f"model {path}: missing file: {exc.filename or exc}") from exc
    except (ValueError, KeyError, TypeError, OSError, ImportError, AttributeError) as exc:
        raise EngineError(f"model {path}: cannot load: {_describe(exc)}") from exc
    if image_min_tokens is not None or image_max_tokens is not None:
        set_image_tokens(path, processor, image_min_tokens, image_max_tokens)
    _settle(vlm)
    view = TextView(vlm)
    size = tree_reduce(lambda acc, a: acc + a.nbytes, vlm.parameters(), 0)
    n_params = tree_reduce(lambda acc, a: acc + a.size, vlm.parameters(), 0)
    return MultimodalModel(
        model=view, n_params=int(n_params), size_bytes=int(size), **checkpoint_facts(path, config, tokenizer, name),
        media=MediaModel(vlm=vlm, processor=processor, modalities=kinds, model_type=str(config.get("model_type", ""))),
    )


def set_image_tokens(path: Path, processor: Any, low: int | None, high: int | None) -> None:
    """Bound one image's token count through the image processor's pixel budget (one token per merged patch)."""
    images = getattr(processor, "image_processor", None)
    patch, merge = getattr(images, "patch_size", None), getattr(images, "merge_size", None)
    if not (images is not None and hasattr(images, "min_pixels") and hasattr(images, "max_pixels") and patch and merge):
        raise EngineError(f"model {path}: --image-min-tokens and --image-max-tokens need an image processor with "
                          f"a pixel budget (dynamic resolution); {type(images).__name__} has a fixed image size")
    per_token = int(patch * merge) ** 2
    if low is not None:
        images.min_pixels = max(1, low) * per_token
    if high is not None:
        images.max_pixels = max(1, high) * per_token
    if images.min_pixels > images.max_pixels:
        raise EngineError(f"model {path}: --image-min-tokens is larger than --image-max-tokens")


def _settle(vlm: Any) -> None:
    """Evaluate every array the model holds, its private constants included (Gemma 4's audio tower keeps its
    timescales as ``_inv_timescales``): an array left as a graph on the loading thread's stream cannot be computed
    on the worker's thread later."""
    import mlx.core as mx
    import mlx.nn as nn

    arrays: list[Any] = []
    for module in vlm.modules():
        for value in list(module.values()) + list(vars(module).values()):
            if isinstance(value, mx.array):
                arrays.append(value)
            elif isinstance(value, nn.Module):  # a submodule held outside the tree (``__new__`` helpers)
                arrays += [v for v in list(value.values()) + list(vars(value).values()) if isinstance(v, mx.array)]
    mx.eval(arrays)

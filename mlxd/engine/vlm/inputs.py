"""A media prompt made ready for the worker: the processor's token ids (each image's placeholder expanded to its
patch count) and the arrays its vision and audio towers read, keyed by the media's content.

Runs on the model worker thread (the processor makes MLX arrays). The api layer hands it the rendered prompt text,
with one media marker where each image or clip goes, and the decoded images and clips in the same order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Sequence

from mlxd.engine.vlm.load import MediaModel
from mlxd.errors import InvalidRequest

# How each model family writes one image (or clip) in its prompt, for the processor to expand; families not
# listed use their processor's own image token.
IMAGE_SLOTS = {
    "qwen2_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen3_vl": "<|vision_start|><|image_pad|><|vision_end|>",
}
# Keys of the processor's output that are not arrays for the towers.
_TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class Medium:
    """One decoded image (a PIL image) or clip (float32 mono samples at ``rate``), with its source bytes' hash."""

    kind: str  # "image" or "audio"
    data: Any
    digest: str
    rate: int = 0


@dataclass(frozen=True)
class MediaInputs:
    """The towers' inputs of one prompt and the key that tells its media apart from any other's."""

    key: str
    arrays: dict[str, Any] = field(repr=False)
    n_images: int = 0
    n_audio: int = 0


def media_key(media: Sequence[Medium]) -> str:
    """A digest of the media's kinds and contents in order: equal only for the same images and clips."""
    h = hashlib.sha256()
    for m in media:
        h.update(f"{m.kind}:{m.digest};".encode())
    return h.hexdigest()[:32]


def prepare(model: MediaModel, text: str, marker: str, media: Sequence[Medium]) -> tuple[list[int], MediaInputs]:
    """Token ids and tower inputs for ``text``, whose ``marker`` occurrences stand for ``media`` in order."""
    n_markers = text.count(marker)
    if n_markers != len(media):
        raise InvalidRequest(f"number of bitmaps ({len(media)}) does not match number of markers ({n_markers})")
    media, text = _cut_long_clips(model, list(media), text, marker)
    images = [m.data for m in media if m.kind == "image"]
    audio = [m.data for m in media if m.kind == "audio"]
    if images and not model.modalities.vision:
        raise InvalidRequest("image input is not supported by this model")
    if audio and not model.modalities.audio:
        raise InvalidRequest("audio input is not supported by this model")
    processor = model.processor
    image_slot = IMAGE_SLOTS.get(model.model_type) or getattr(processor, "image_token", None) or ""
    audio_slot = getattr(processor, "audio_token", None) or ""
    pieces = text.split(marker)
    out = [pieces[0]]
    for m, rest in zip(media, pieces[1:]):
        out.append(image_slot if m.kind == "image" else audio_slot)
        out.append(rest)
    kwargs: dict[str, Any] = {}
    if images:
        kwargs["images"] = images
    if audio:
        kwargs["audio"] = audio
    try:
        features = processor(text=["".join(out)], padding=False, return_tensors="mlx", **kwargs)
    except (ValueError, TypeError, OSError) as exc:
        raise InvalidRequest(f"failed to process media: {exc}") from exc
    ids = features["input_ids"]
    tokens = [int(t) for t in (ids.tolist()[0] if hasattr(ids, "tolist") else ids[0])]
    arrays = {k: v for k, v in dict(features).items() if k not in _TEXT_KEYS and v is not None}
    return tokens, MediaInputs(key=media_key(media), arrays=arrays, n_images=len(images), n_audio=len(audio))


def audio_window_s(model: MediaModel) -> float:
    """The longest clip the audio tower takes in one piece (Gemma 4: 750 tokens of 40 ms), 0 when unbounded."""
    processor = model.processor
    n, ms = getattr(processor, "audio_seq_length", None), getattr(processor, "audio_ms_per_token", None)
    return float(n) * float(ms) / 1000.0 if n and ms else 0.0


def _cut_long_clips(model: MediaModel, media: list[Medium], text: str, marker: str) -> tuple[list[Medium], str]:
    """Clips longer than the tower's window become consecutive pieces, each with its own marker (as b10621
    splits long audio into chunks)."""
    window = audio_window_s(model)
    if not window or not any(m.kind == "audio" and len(m.data) > window * m.rate for m in media):
        return media, text
    pieces = text.split(marker)
    out_media: list[Medium] = []
    out_text = [pieces[0]]
    for m, rest in zip(media, pieces[1:]):
        if m.kind == "audio" and len(m.data) > window * m.rate:
            step = int(window * m.rate)
            parts = [Medium("audio", m.data[i:i + step], f"{m.digest}:{i}", m.rate)
                     for i in range(0, len(m.data), step)]
        else:
            parts = [m]
        out_media += parts
        out_text.append(marker * len(parts) + rest)
    return out_media, "".join(out_text)

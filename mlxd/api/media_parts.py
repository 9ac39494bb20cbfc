"""Media parts of chat messages and native prompts, replaced by the media marker, and turned into a media prompt.

Chat content parts (OpenAI ``image_url`` and ``input_audio``, Anthropic image blocks and Responses
``input_image``/``input_audio``, all brought to OpenAI shapes by the schemas) become text parts holding the media
marker, as b10621 does, so that the chat template renders them where they stood; the prompt's tokens are then
made by the model's processor, which expands each marker into the model's own placeholder tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from mlxd.api import media, media_budget
from mlxd.api.media import MARKER, Source
from mlxd.engine import TEXT_ONLY, Modalities
from mlxd.errors import InvalidRequest, NoModalityTower

IMAGE_REFUSAL = "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
AUDIO_REFUSAL = "audio input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
MULTIMODAL_REFUSAL = "Multimodal data provided, but model does not support multimodal requests."


class MediaPrompt(list[int]):
    """A prompt's token ids that carry media: before ``resolve``, the text's own tokens with the rendered
    ``text`` and the ``sources``; after, the processor's ids with ``media`` (an ``engine.vlm.MediaInputs``)."""

    def __init__(self, tokens: list[int], text: str = "", sources: list[Source] | None = None,
                 inputs: Any = None) -> None:
        super().__init__(tokens)
        self.text, self.sources, self.media = text, list(sources or []), inputs


def modalities_of(model: Any) -> Modalities:
    """What the served model takes besides text (nothing for a text checkpoint or one served with --no-mmproj)."""
    parts = getattr(model.loaded, "media", None)
    return parts.modalities if parts is not None else TEXT_ONLY


def _image_url(part: Mapping[str, Any]) -> str:
    value = part.get("image_url")
    if isinstance(value, str):  # Responses' input_image
        return value
    if not isinstance(value, Mapping):
        return ""
    if value.get("type") == "base64":  # an Anthropic image source
        return f"data:{value.get('media_type', 'image/png')};base64,{value.get('data', '')}"
    return str(value.get("url", "") or "")


def _audio_data(part: Mapping[str, Any]) -> str:
    value = part.get("input_audio")
    if not isinstance(value, Mapping):
        return ""
    return str(value.get("data", value.get("url", "")) or "")


def extract(messages: Any, model: Any) -> tuple[Any, list[Source]]:
    """``messages`` with every media part replaced by a marker text part, and the parts' sources in order.

    A model without the modality refuses the part with b10621's 500, before anything is read.
    """
    if not isinstance(messages, list):
        return messages, []
    kinds = modalities_of(model)
    sources: list[Source] = []
    out: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            out.append(message)
            continue
        parts: list[Any] = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind in ("image_url", "input_image", "image"):
                if not kinds.vision:
                    raise NoModalityTower(IMAGE_REFUSAL)
                sources.append(Source("image", _image_url(part)))
            elif kind in ("input_audio", "audio", "input_file"):
                if not kinds.audio or kind == "input_file":
                    raise NoModalityTower(AUDIO_REFUSAL)
                sources.append(Source("audio", _audio_data(part), accept_data_uri=False))
            else:
                parts.append(part)
                continue
            parts.append({"type": "text", "text": MARKER})
        out.append({**message, "content": parts})
    media.check_count(len(sources))
    return out, sources


def completion_prompt(prompt: Mapping[str, Any], model: Any, tokens: list[int]) -> list[int]:
    """A native ``{"prompt_string", "multimodal_data"}`` prompt as a ``MediaPrompt`` (``tokens``: the string's own)."""
    data = prompt.get("multimodal_data")
    if data is None:
        return tokens
    if not modalities_of(model).multimodal:
        raise InvalidRequest(MULTIMODAL_REFUSAL)
    if not isinstance(data, list) or not all(isinstance(d, str) for d in data):
        raise InvalidRequest("\"multimodal_data\" must be an array of base64 strings")
    media.check_count(len(data))
    # Raw base64 each (b10621 decodes these without the data: scheme); the kind is found from the bytes.
    return MediaPrompt(tokens, str(prompt.get("prompt_string", "")), [Source("any", d, False) for d in data])


def _read_all(sources: list[Source], media_path: str | None, modalities: Modalities) -> list[tuple[str, bytes, int]]:
    """Each source's kind, encoded bytes and declared pixels (images' headers only: nothing is decoded yet), within
    one request's budget (mlxd.api.media_budget)."""
    out = []
    pixels = n_bytes = 0
    for src in sources:
        data = media.read_source(src, media_path)
        kind = src.kind
        if kind == "any":
            kind = "audio" if modalities.audio and (_looks_like_audio(data) or not modalities.vision) else "image"
        size = media.image_pixels(data) if kind == "image" else 0
        pixels, n_bytes = pixels + size, n_bytes + len(data)
        media_budget.check_request(pixels, n_bytes)
        out.append((kind, data, size))
    return out


def _decode_all(read: list[tuple[str, bytes, int]], rate: int) -> list[Any]:
    from mlxd.engine import Medium

    out = []
    for kind, data, _ in read:
        if kind == "image":
            out.append(Medium("image", media.decode_image(data), media.digest(data)))
        else:
            out.append(Medium("audio", media.decode_audio(data, rate), media.digest(data), rate))
    return out


def _looks_like_audio(data: bytes) -> bool:
    """wav, mp3, flac or ogg by their first bytes (anything else is taken for an image)."""
    return (data[:4] == b"RIFF" and data[8:12] == b"WAVE") or data[:3] == b"ID3" or data[:4] in (b"fLaC", b"OggS") \
        or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)


async def resolve(tokens: list[int], model: Any, media_path: str | None) -> list[int]:
    """A ``MediaPrompt`` with its media read, decoded (on a pooled thread: no MLX there) and processed (on the
    model's worker thread); any other token list as it is."""
    if not isinstance(tokens, MediaPrompt) or tokens.media is not None:
        return tokens
    parts = getattr(model.loaded, "media", None)
    if parts is None:
        raise InvalidRequest(MULTIMODAL_REFUSAL)
    extractor = getattr(parts.processor, "feature_extractor", None)
    rate = int(getattr(extractor, "sampling_rate", 0) or media.AUDIO_RATE)
    read = await asyncio.to_thread(_read_all, tokens.sources, media_path, parts.modalities)
    # The decoded images live until the processor has made the model's inputs from them.
    async with media_budget.BUDGET.held(sum(size for _, _, size in read)):
        decoded = await asyncio.to_thread(_decode_all, read, rate)
        ids, inputs = await asyncio.wrap_future(model.worker.prepare(tokens.text, MARKER, decoded))
        del decoded
    return MediaPrompt(ids, tokens.text, tokens.sources, inputs)


async def token_count(tokens: list[int], model: Any, state: Any) -> int:
    """How many tokens a rendered prompt is once its media are expanded (the routes that count without generating)."""
    return len(await resolve(tokens, model, state.config.media_path))

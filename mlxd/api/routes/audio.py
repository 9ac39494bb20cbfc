"""``POST /v1/audio/transcriptions`` and ``/audio/transcriptions``: b10621's translation of a transcription
upload into a chat completion through the loaded model (not a speech-to-text model of its own)."""

from __future__ import annotations

from sanic import Blueprint, Request

from mlxd.api.context import served_model
from mlxd.api.media_parts import modalities_of
from mlxd.errors import NotSupported

bp = Blueprint("audio")

NO_AUDIO = "The current model does not support audio input."


@bp.post("/v1/audio/transcriptions")
@bp.post("/audio/transcriptions", name="transcriptions_alias")
async def transcriptions(request: Request):
    if not modalities_of(served_model(request)).audio:  # before any field check, as b10621
        raise NotSupported(NO_AUDIO)
    raise NotSupported(NO_AUDIO)

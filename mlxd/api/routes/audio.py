"""``POST /v1/audio/transcriptions`` and ``/audio/transcriptions``.

b10621 transcribes with an audio-capable multimodal model (``--mmproj``); mlxd serves text-only MLX checkpoints,
so the route answers upstream's 501 for a model without audio input, whatever the upload.
"""

from __future__ import annotations

from sanic import Blueprint, Request

from mlxd.api.chat import AUDIO_REFUSAL
from mlxd.errors import NotSupported

bp = Blueprint("audio")


@bp.post("/v1/audio/transcriptions")
@bp.post("/audio/transcriptions", name="transcriptions_alias")
async def transcriptions(request: Request):
    raise NotSupported(AUDIO_REFUSAL)

"""Stream resume (``X-Conversation-Id``, ``GET /v1/stream``, ``POST /v1/streams/lookup``, ``DELETE /v1/stream``) and
``POST /v1/chat/completions/control`` (``reasoning_end``).

b10621 keeps a finished or interrupted stream so a client can re-attach to it, and lets a client end a running
generation's reasoning early. mlxd does not keep stream sessions nor steer a running generation yet; these routes
answer a 501 that says so (never a 404), and the manifest records them as deferred.
"""

from __future__ import annotations

from sanic import Blueprint, Request

from mlxd.errors import NotSupported

bp = Blueprint("streams")

RESUME = (
    "stream sessions are not supported by mlxd yet: a stream cannot be looked up, resumed or deleted after it "
    "started; repeat the request instead"
)
CONTROL = (
    "generation control is not supported by mlxd yet: 'reasoning_end' cannot be applied to a running generation; "
    "use --reasoning-budget or the request's chat_template_kwargs instead"
)


@bp.get("/v1/stream")
async def stream_get(request: Request):
    raise NotSupported(RESUME)


@bp.post("/v1/streams/lookup")
async def streams_lookup(request: Request):
    raise NotSupported(RESUME)


@bp.delete("/v1/stream")
async def stream_delete(request: Request):
    raise NotSupported(RESUME)


@bp.post("/v1/chat/completions/control")
async def control(request: Request):
    raise NotSupported(CONTROL)

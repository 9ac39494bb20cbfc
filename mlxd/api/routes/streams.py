"""Stream resume (``GET /v1/stream``, ``POST /v1/streams/lookup``, ``DELETE /v1/stream``; sessions start with
``X-Conversation-Id`` on a streamed request, see ``mlxd.api.stream_sessions``) and
``POST /v1/chat/completions/control`` (``{"id": "chatcmpl-...", "action": "reasoning_end"}``: the running chat
completion's reasoning ends at its next token, see ``mlxd.api.controls``).
"""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import controls, sse
from mlxd.api.body import json_object
from mlxd.api.context import serving
from mlxd.api.errors import json_response
from mlxd.api.stream_sessions import sessions
from mlxd.errors import InvalidRequest

bp = Blueprint("streams")


def _conversation_id(request: Request) -> str:
    value = request.args.get("conv_id", "")
    if not value:
        raise InvalidRequest("'conv_id' is required")
    return value


@bp.get("/v1/stream")
async def stream_get(request: Request) -> HTTPResponse | None:
    """Re-attach to a stream: its bytes from ``from`` (default 0), then the live tail until it ends."""
    session = sessions(request).get(_conversation_id(request))
    raw = request.args.get("from", "0")
    try:
        offset = int(raw)
    except ValueError as exc:
        raise InvalidRequest(f"'from' must be a byte offset, not {raw!r}") from exc
    if offset < session.dropped or offset > session.total_bytes:
        raise InvalidRequest(f"'from' must be between {session.dropped} and {session.total_bytes}, got {offset}")
    await sse.stream(request, session.tail(offset), ping=sse.ping_interval(serving(request).config))
    return None  # streamed: the response went out through request.respond


@bp.post("/v1/streams/lookup")
async def streams_lookup(request: Request) -> HTTPResponse | None:
    """The known sessions among ``conversation_ids`` (an empty list when none)."""
    ids = json_object(request).get("conversation_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise InvalidRequest("'conversation_ids' must be an array of strings")
    return json_response(sessions(request).lookup(ids))


@bp.delete("/v1/stream")
async def stream_delete(request: Request) -> HTTPResponse | None:
    """Stop a session's generation and forget the session."""
    sessions(request).delete(_conversation_id(request))
    return HTTPResponse(status=204)


@bp.post("/v1/chat/completions/control")
async def control(request: Request) -> HTTPResponse | None:
    """Act on a running completion: ``reasoning_end`` (the only action b10621 knows)."""
    body = json_object(request)
    # b10621 reads both with json_value: a value of another type counts as absent.
    completion_id = body.get("id") if isinstance(body.get("id"), str) else ""
    action = body.get("action") if isinstance(body.get("action"), str) else ""
    if not completion_id:
        raise InvalidRequest("missing completion id")
    if action != "reasoning_end":
        raise InvalidRequest("unknown control action")
    return json_response(controls.running(request).end_reasoning(completion_id))

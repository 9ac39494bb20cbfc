"""The conversation store's REST routes on the public listener, under ``/webui/`` (and ``--api-prefix``).

Behind the public API's key gate like any API route. The owner of every row is the sha256 of the presented key when
the server has keys, and "" when it has none (an open server's conversations are open too, as the page says).
An unknown id and another key's id both answer the same 404. A store that cannot serve answers 503 with the
reason, which the page shows while chat goes on.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ValidationError
from sanic import Blueprint, HTTPResponse, Request, Sanic
from sanic.response import json as json_response

from mlxd.api import ServingState
from mlxd.config import Config
from mlxd.web import store as q
from mlxd.web.schemas import ConversationPatch, ImportFile, MessagePut, NewConversation
from mlxd.web.store import ConversationStore, NotFound, StoreUnavailable

ID = "<cid:[A-Za-z0-9_-]{1,64}>"
MID = "<mid:[A-Za-z0-9_-]{1,64}>"


def error(status: int, kind: str, message: str) -> HTTPResponse:
    return json_response({"error": {"code": status, "message": message, "type": kind}}, status=status)


def owner_of(request: Request, config: Config) -> str:
    """The sha256 of the presented key on a server with keys (the gate has checked it), else ""."""
    if not (config.api_key or config.api_key_file):
        return ""
    value = request.headers.get("authorization", "") or request.headers.get("x-api-key", "")
    key = value[len("Bearer "):] if value.startswith("Bearer ") else value
    return hashlib.sha256(key.encode()).hexdigest()


def _body(request: Request, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate_json(request.body or b"{}")
    except ValidationError as exc:
        raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from exc


def install_store(app: Sanic, state: ServingState, prefix: str, store: ConversationStore | None) -> None:
    bp = Blueprint("webui_store", url_prefix=prefix + "/webui")

    async def run(request: Request, fn: Any, *args: Any, status: int = 200) -> HTTPResponse:
        if store is None:
            return error(404, "not_found_error", "the conversation store is off (--no-webui-store)")
        owner = owner_of(request, state.config)
        try:
            result = await store.call(fn, owner, *args)
        except NotFound:
            return error(404, "not_found_error", "conversation not found")
        except StoreUnavailable as exc:
            return error(503, "unavailable_error", str(exc))
        return json_response(result, status=status)

    def guarded(handler: Any) -> Any:
        async def wrapped(request: Request, **kwargs: Any) -> HTTPResponse:
            try:
                return await handler(request, **kwargs)
            except ValueError as exc:
                return error(400, "invalid_request_error", str(exc))
        wrapped.__name__ = handler.__name__
        return wrapped

    @bp.get("/store")
    async def status(request: Request) -> HTTPResponse:
        config = state.config
        keyed = bool(config.api_key or config.api_key_file)
        return json_response({"enabled": store is not None, "error": store.error if store else None,
                              "scoped": keyed})

    @bp.get("/conversations")
    async def listing(request: Request) -> HTTPResponse:
        return await run(request, q.list_conversations, str(request.args.get("q", "")))

    @bp.post("/conversations")
    @guarded
    async def create(request: Request) -> HTTPResponse:
        body = _body(request, NewConversation)
        return await run(request, q.create_conversation, body.title, body.id, status=201)

    @bp.get(f"/conversations/{ID}")
    async def read(request: Request, cid: str) -> HTTPResponse:
        return await run(request, q.get_conversation, cid)

    @bp.patch(f"/conversations/{ID}")
    @guarded
    async def update(request: Request, cid: str) -> HTTPResponse:
        body = _body(request, ConversationPatch)
        return await run(request, q.update_conversation, cid, body.title, body.leaf)

    @bp.delete(f"/conversations/{ID}")
    async def delete(request: Request, cid: str) -> HTTPResponse:
        def drop(db: Any, owner: str, cid: str) -> dict[str, bool]:
            q.delete_conversation(db, owner, cid)
            return {"deleted": True}
        return await run(request, drop, cid)

    @bp.put(f"/conversations/{ID}/messages/{MID}")
    @guarded
    async def put_message(request: Request, cid: str, mid: str) -> HTTPResponse:
        body = _body(request, MessagePut)
        return await run(request, q.put_message, cid, mid, body.parent, body.role, body.body(), body.leaf)

    @bp.get("/export")
    async def export(request: Request) -> HTTPResponse:
        def dump(db: Any, owner: str) -> dict[str, Any]:
            return {"conversations": q.export_conversations(db, owner)}
        return await run(request, dump)

    @bp.post("/import")
    @guarded
    async def import_(request: Request) -> HTTPResponse:
        body = _body(request, ImportFile)
        items = [c.model_dump() for c in body.conversations]
        def load(db: Any, owner: str) -> dict[str, Any]:
            return {"imported": q.import_conversations(db, owner, items)}
        return await run(request, load, status=201)

    app.blueprint(bp)

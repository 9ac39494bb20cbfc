"""Vertex AI's custom-container protocol, as b10621 serves it when ``AIP_MODE=PREDICTION``.

``POST $AIP_PREDICT_ROUTE`` (default ``/predict``) takes ``{"instances": [{"@requestFormat": F, ...}, ...]}`` (at
most 128) and answers ``{"predictions": [...]}``: each instance goes, without its ``@requestFormat`` and never
streamed, to the route F names (a path, or its camelCase alias: ``chatCompletions`` for ``/v1/chat/completions``),
and its answer body (an error envelope included) is its prediction. ``$AIP_HEALTH_ROUTE``, when set, answers as
``/health``; ``$AIP_HTTP_PORT`` (default 8080) replaces ``--port`` (the daemon binds it).

Each instance is sent to this same listener over loopback HTTP, so it passes the API key check, the loading gate
and the sleep gate as any request does (b10621 calls the route's handler directly, after its own checks on the
outer request; the outcome is the same).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from sanic import HTTPResponse, Request, Sanic
from sanic.models.handler_types import RouteHandler

from mlxd.api.errors import json_response

MAX_INSTANCES = 128
FORWARDED_HEADERS = ("authorization", "x-api-key")


@dataclass(frozen=True)
class VertexSettings:
    """The ``AIP_*`` variables b10621 reads (``gcp_params``)."""

    enabled: bool
    path_health: str
    path_predict: str
    port: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "VertexSettings":
        def path(name: str, default: str) -> str:
            value = env.get(name) or default
            return value if not value or value.startswith("/") else "/" + value

        return cls(enabled=env.get("AIP_MODE", "") == "PREDICTION", path_health=path("AIP_HEALTH_ROUTE", ""),
                   path_predict=path("AIP_PREDICT_ROUTE", "/predict"), port=int(env.get("AIP_HTTP_PORT") or 8080))


def request_format(path: str) -> str:
    """The camelCase alias of a route: ``/v1/chat/completions`` -> ``chatCompletions``, ``/apply-template`` ->
    ``applyTemplate`` (b10621's ``path_to_gcp_format``)."""
    text = path[3:] if path.startswith("/v1") and len(path) > 3 else path
    text = text.removeprefix("/")
    out: list[str] = []
    capital = False
    for char in text:
        if char in ":<":  # path parameters
            break
        if char in "/-_":
            capital = True
        else:
            out.append(char.upper() if capital else char)
            capital = False
    return "".join(out)


def _error(message: str, kind: str = "invalid_request_error", code: int = 400) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": kind}}


def _post_paths(app: Sanic, prefix: str) -> dict[str, str]:
    """Every mounted POST path (without ``--api-prefix``) by its camelCase alias; the first path wins a clash."""
    paths: dict[str, str] = {}
    for route in app.router.routes:
        if "POST" not in route.methods:
            continue
        path = "/" + route.path.lstrip("/")
        if prefix and path.startswith(prefix + "/"):
            path = path[len(prefix):]
        paths.setdefault(path, path)
    aliases: dict[str, str] = {}
    for path in sorted(paths):
        aliases.setdefault(request_format(path), path)
    return {**paths, **aliases}


def _loopback(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Any:
    """POST ``body`` to ``url`` (this listener) and return the answer body, parsed when it is JSON."""
    context = ssl._create_unverified_context() if url.startswith("https:") else None  # noqa: S323 (our own cert)
    req = urllib.request.Request(url, data=body, headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as response:  # noqa: S310 (loopback)
            data = response.read()
    except urllib.error.HTTPError as exc:  # an error envelope is the instance's prediction
        data = exc.read()
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", errors="replace")


def install(app: Sanic, settings: VertexSettings, prefix: str = "", timeout: float = 3600.0) -> None:
    """Mount the predict route (and the health alias) on ``app`` when ``settings.enabled``."""
    if not settings.enabled:
        return
    routes: dict[str, str] = {}

    async def predict(request: Request) -> HTTPResponse:
        if not routes:
            routes.update(_post_paths(app, prefix))
        try:
            data = json.loads(request.body or b"")
        except ValueError as exc:
            return json_response(_error(str(exc)), status=400)
        if not isinstance(data, dict):
            return json_response(_error("request body must be a JSON object"), status=400)
        instances = data.get("instances")
        if not isinstance(instances, list):
            return json_response(_error("request body must include an array field named instances"), status=400)
        if len(instances) > MAX_INSTANCES:
            return json_response(_error(f"instances array exceeds maximum size of {MAX_INSTANCES}"), status=400)
        sockname = request.conn_info.sockname if request.conn_info else None
        if not isinstance(sockname, tuple):  # a Unix socket: the loopback dispatch below needs TCP
            return json_response(_error("the predict route needs a TCP listener", "not_supported_error", 501),
                                 status=501)
        host, port = sockname[:2]
        if ":" in str(host):
            host = f"[{host}]"
        base = f"{request.scheme}://{host}:{port}{prefix}"
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}

        async def one(instance: Any) -> Any:
            if not isinstance(instance, dict):
                return _error("each instance must be a JSON object")
            kind = instance.get("@requestFormat")
            if not isinstance(kind, str):
                return _error("each instance must include a string @requestFormat")
            path = routes.get(kind)
            if path is None or path == settings.path_predict:
                return _error(f"no handler registered for @requestFormat: {kind}")
            payload = {k: v for k, v in instance.items() if k != "@requestFormat"}
            if "stream" in payload:
                payload["stream"] = False  # the predict route never streams
            body = json.dumps(payload).encode()
            return await asyncio.to_thread(_loopback, base + path, body, headers, timeout)

        predictions = await asyncio.gather(*(one(instance) for instance in instances))
        return json_response({"predictions": list(predictions)})

    app.add_route(predict, prefix + settings.path_predict, methods=["POST"], name="gcp_predict")
    if settings.path_health:
        from mlxd.api.routes.health import health

        # sanic types a route-decorated handler as its coroutine; at runtime the decorator returns the handler.
        app.add_route(cast(RouteHandler, health), prefix + settings.path_health, methods=["GET"], name="gcp_health")

"""What happens to every request before routing: CORS preflight, the loading gate, the API key check, and a large
body decoded off the event loop.

The order is b10621's pre-routing handler: OPTIONS is answered at once (browsers send no credentials on a
preflight), then nothing but 503 while no model is loaded, then the key check. Each response carries
``Access-Control-Allow-Origin`` as b10621 sets it (see ``Cors``).
"""

from __future__ import annotations

import hmac
import logging
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlsplit

from sanic import HTTPResponse, Request, Sanic

from mlxd.api import offload
from mlxd.api.body import decode_large_body
from mlxd.api.errors import loading, unauthorized
from mlxd.api.state import ServingState
from mlxd.config import Config

log = logging.getLogger("mlxd.api")

# Routes b10621 leaves open when --api-key is set (besides its web UI, which mlxd does not serve).
PUBLIC_PATHS = ("/health", "/v1/health")


def _csv(value: Any) -> list[str]:
    """An option that may arrive as a comma list or as a list of items."""
    if value is None:
        return []
    items: Iterable[Any] = value.split(",") if isinstance(value, str) else value
    return [str(item).strip() for item in items if str(item).strip()]


def read_key_file(path: str | Path) -> list[str]:
    """``--api-key-file``: one key per line; blank lines and lines starting with '#' are skipped."""
    keys = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        key = line.strip()
        if key and not key.startswith("#"):
            keys.append(key)
    return keys


class KeyRing:
    """The accepted API keys of one configuration (``--api-key`` items plus ``--api-key-file`` lines)."""

    def __init__(self, config: Config) -> None:
        self.keys: list[bytes] = [k.encode() for k in _csv(config.api_key)]
        self.required = bool(self.keys)
        key_file = config.api_key_file
        if key_file:
            self.required = True  # an unreadable key file locks the API rather than opening it
            try:
                self.keys += [k.encode() for k in read_key_file(key_file)]
            except (OSError, UnicodeDecodeError) as exc:
                log.error("cannot read --api-key-file %s: %s; every key is refused", key_file, exc)

    def accepts(self, presented: str) -> bool:
        """Constant-time membership: every key is compared, whatever matched first."""
        given = presented.encode()
        matched = False
        for key in self.keys:
            matched |= hmac.compare_digest(given, key)
        return matched


def presented_key(request: Request) -> str:
    """The key a client sent: ``Authorization: Bearer KEY``, else ``X-Api-Key`` (Anthropic clients)."""
    value = request.headers.get("authorization", "") or request.headers.get("x-api-key", "")
    return value[len("Bearer "):] if value.startswith("Bearer ") else value


def origin_is_localhost(origin: str) -> bool:
    """Whether an ``Origin`` value's host is localhost, 127.0.0.1 or ::1 (any scheme and port)."""
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in ("localhost", "127.0.0.1", "::1")


class Cors:
    """``--cors-origins``/``--cors-methods``/``--cors-headers``/``--cors-credentials`` as response headers.

    b10621's three cases: ``*`` with credentials echoes the request's Origin (any origin, credentials allowed);
    ``localhost`` echoes it only for a localhost origin and sends no header otherwise; anything else is sent as
    given (``*`` without credentials, or the configured origin, which a browser then compares itself).
    """

    def __init__(self, config: Config) -> None:
        self.origins = ",".join(_csv(config.cors_origins))
        self.methods = ", ".join(_csv(config.cors_methods))
        self.headers = ", ".join(_csv(config.cors_headers))
        self.credentials = bool(config.cors_credentials)

    def allow_origin(self, request: Request) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for ``request``, or None for no header at all."""
        origin = request.headers.get("origin", "")
        if self.origins == "*" and self.credentials:
            return origin
        if self.origins == "localhost":
            if origin and origin_is_localhost(origin):
                return origin
            if origin:
                log.warning("(CORS) skip non-localhost origin: %s", origin)
            return None
        return self.origins

    def preflight(self, request: Request) -> HTTPResponse:
        headers = {
            "Access-Control-Allow-Credentials": "true" if self.credentials else "false",
            "Access-Control-Allow-Methods": self.methods,
            "Access-Control-Allow-Headers": self.headers,
        }
        origin = self.allow_origin(request)
        if origin is not None:
            headers["Access-Control-Allow-Origin"] = origin
        return HTTPResponse("", status=200, headers=headers, content_type="text/html")


class _PerConfig:
    """The key ring and CORS policy of the configuration in service, rebuilt only when the daemon swaps it."""

    def __init__(self) -> None:
        self._config: Config | None = None
        self._derived: tuple[KeyRing, Cors] | None = None

    def get(self, config: Config) -> tuple[KeyRing, Cors]:
        if self._derived is None or config is not self._config:
            self._derived, self._config = (KeyRing(config), Cors(config)), config
        return self._derived


def install(app: Sanic, state: ServingState, prefix: str = "") -> None:
    """Register the pre-routing checks and the CORS response header on ``app``."""
    derived = _PerConfig()
    public = {prefix + path for path in PUBLIC_PATHS}

    async def gate(request: Request) -> HTTPResponse | None:
        keys, cors = derived.get(state.config)
        if request.method == "OPTIONS":
            return cors.preflight(request)
        if not state.ready:
            return loading()
        if keys.required and request.path not in public and not keys.accepts(presented_key(request)):
            log.warning("unauthorized: invalid API key on %s %s", request.method, request.path)
            return unauthorized()
        return None

    async def allow_origin(request: Request, response: HTTPResponse) -> None:
        _, cors = derived.get(state.config)
        origin = cors.allow_origin(request)
        if origin is not None:
            response.headers.setdefault("Access-Control-Allow-Origin", origin)

    async def large_body(request: Request) -> None:
        if len(request.body or b"") >= offload.LARGE_BYTES:
            request.ctx.large_body = True
        await decode_large_body(request)

    async def after_large(request: Request, response: HTTPResponse | None = None) -> None:
        # Response middleware runs when a stream's headers go out, the handler signal once it returned: a large
        # request's memory is released after either (the release waits a moment and runs at most once at a time).
        if getattr(request.ctx, "large_body", False):
            offload.release_memory_soon()

    app.on_request(gate, priority=100)
    app.on_request(large_body, priority=50)
    app.on_response(allow_origin, priority=100)
    app.on_response(after_large, priority=50)
    app.signal("http.handler.after")(after_large)

"""``GET /`` and the page's assets, or ``--path DIR``'s files, before any route runs.

Served by a request middleware rather than by routes, as b10621 serves its embedded assets and its ``--path`` mount
ahead of its handlers: static files are public even with ``--api-key`` (b10621's
``test_access_static_assets_without_api_key``), and answer while a model loads. ``--no-webui`` (read per request)
leaves every path to the routes, so ``/`` gets b10621's 404 envelope. ``--path`` is confined to its directory:
a path that resolves outside it (``..``, an encoded ``%2e%2e``, a symlink) is not served.
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
from importlib import resources
from pathlib import Path
from urllib.parse import unquote

from sanic import HTTPResponse, Request, Sanic

from mlxd.api import ServingState, json_error

PACKAGED = Path(str(resources.files("mlxd.web").joinpath("static")))
# The built-in page may run its own scripts and styles only, and talk to this server only: a payload that slipped
# past the renderer could still load or run nothing.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "media-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "frame-ancestors 'none'; form-action 'none'")
TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".webmanifest":
         "application/manifest+json", ".json": "application/json", ".svg": "image/svg+xml",
         ".html": "text/html; charset=utf-8"}


def content_type(path: Path) -> str:
    return TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def confined(root: Path, url_path: str) -> Path | None:
    """The file ``url_path`` names under ``root`` (``/`` is ``index.html``), or None when there is none inside."""
    rel = unquote(url_path).lstrip("/") or "index.html"
    if "\x00" in rel:
        return None
    base = root.resolve()
    try:
        target = (base / rel).resolve()
    except (OSError, RuntimeError):
        return None
    if not target.is_relative_to(base) or not target.is_file():
        return None
    return target


def _packaged() -> dict[str, Path]:
    """URL path -> file of every packaged asset, fixed at import (only these paths are taken from the routes)."""
    files = {"/" + p.relative_to(PACKAGED).as_posix(): p for p in PACKAGED.rglob("*") if p.is_file()}
    files["/"] = PACKAGED / "index.html"
    return files


class Assets:
    """The packaged page's bytes, read once."""

    def __init__(self) -> None:
        self.files = _packaged()
        self._cache: dict[str, tuple[bytes, str]] = {}

    def get(self, url_path: str) -> tuple[bytes, str] | None:
        path = self.files.get(url_path)
        if path is None:
            return None
        if url_path not in self._cache:
            body = path.read_bytes()
            self._cache[url_path] = (body, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')
        return self._cache[url_path]


def file_response(request: Request, body: bytes, etag: str, ctype: str, *, page: bool) -> HTTPResponse:
    # no-cache, not immutable: the names carry no content hash, so the browser revalidates with the ETag.
    headers = {"Cache-Control": "no-cache", "ETag": etag, "X-Content-Type-Options": "nosniff"}
    if page:
        headers["Content-Security-Policy"] = CSP
        headers["Referrer-Policy"] = "no-referrer"
    if request.headers.get("if-none-match") == etag:
        return HTTPResponse(status=304, headers=headers)
    return HTTPResponse(body if request.method == "GET" else b"", status=200, headers=headers, content_type=ctype)


PAGE_PATHS = frozenset({"/", "/index.html"})


def install_static(app: Sanic, state: ServingState, prefix: str) -> None:
    """Answer GET/HEAD for the page's files ahead of the API key gate (priority 200 > the gate's 100)."""
    assets = Assets()

    async def serve_static(request: Request) -> HTTPResponse | None:
        config = state.config
        if request.method not in ("GET", "HEAD"):
            return None
        if not config.webui:
            # b10621 keeps the page's paths public with the UI off: they answer its 404 without an API key.
            return json_error(404, "File Not Found", "not_found_error") if request.path in PAGE_PATHS else None
        path = request.path
        if prefix:
            if path == prefix:  # the page's relative URLs need the trailing slash
                return HTTPResponse(status=308, headers={"Location": prefix + "/"})
            if not path.startswith(prefix + "/"):
                return None
            path = path[len(prefix):]
        root = config.path
        if root:
            target = confined(Path(root), path)
            if target is None:
                return None
            body = await asyncio.to_thread(target.read_bytes)
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            return file_response(request, body, etag, content_type(target), page=False)
        found = assets.get("/index.html" if path == "/" else path)
        if found is None:
            return None
        body, etag = found
        return file_response(request, body, etag, content_type(assets.files[path]), page=True)

    app.on_request(serve_static, priority=200)

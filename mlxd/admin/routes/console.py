"""The operator console: ``GET /`` on the admin listener (and its two files), never on the public port.

The page holds no data, so it loads without the token; it asks for the token and sends it as an ``Authorization``
header on every admin call (never a cookie, so another site cannot make the browser call the admin API with it).
Every action it offers is an existing admin route; the console adds no state and no code path of its own.
"""

from __future__ import annotations

from importlib import resources

from sanic import Blueprint, HTTPResponse, Request

FILES = {"/": "index.html", "/console.js": "console.js", "/console.css": "console.css"}
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")

bp = Blueprint("admin_console")


def _asset(name: str) -> HTTPResponse:
    body = resources.files("mlxd.admin").joinpath("console", name).read_bytes()
    suffix = name[name.rfind("."):]
    return HTTPResponse(body, headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP,
                                       "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"},
                        content_type=TYPES[suffix])


@bp.get("/", name="console_page", ctx_kind="page")
async def page(request: Request) -> HTTPResponse:
    return _asset("index.html")


@bp.get("/console.js", name="console_js", ctx_kind="page")
async def script(request: Request) -> HTTPResponse:
    return _asset("console.js")


@bp.get("/console.css", name="console_css", ctx_kind="page")
async def style(request: Request) -> HTTPResponse:
    return _asset("console.css")

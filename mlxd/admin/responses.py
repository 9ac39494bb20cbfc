"""The admin listener's JSON answers and its error envelope (``{"error": {"code", "message"}}``, stable codes)."""

from __future__ import annotations

from typing import Any

from sanic import HTTPResponse

from mlxd import json_out

JSON = "application/json"


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> HTTPResponse:
    return HTTPResponse(json_out.dumps(payload, separators=None), status=status, headers=headers, content_type=JSON)


def error_response(code: str, message: str, status: int) -> HTTPResponse:
    return json_response({"error": {"code": code, "message": message}}, status)

"""The one place where an exception becomes b10621's error envelope on the public API.

Routes raise the typed errors of ``mlxd.errors``; sanic's own exceptions (unknown route, wrong method, body too
large, timeouts) and anything unexpected arrive here too. A traceback is logged, never sent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError
from sanic import HTTPResponse, Request
from sanic import exceptions as sanic_exc
from sanic.handlers import ErrorHandler

from mlxd import json_out
from mlxd.api.body import validation_message
from mlxd.engine import ChatTemplateError
from mlxd.errors import EngineError, MlxdError, RequestError

log = logging.getLogger("mlxd.api")

JSON_CONTENT_TYPE = "application/json; charset=utf-8"


def dumps(payload: Any) -> str:
    """Compact JSON with raw UTF-8 and non-finite numbers as null, as b10621 writes it."""
    return json_out.dumps(payload)


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> HTTPResponse:
    """A JSON response with b10621's content type."""
    return HTTPResponse(dumps(payload), status=status, headers=headers, content_type=JSON_CONTENT_TYPE)


def error_object(status: int, message: str, type: str, **extra: Any) -> dict[str, Any]:
    """The envelope's inner object (``format_error_response``): code, message, type, then any extra keys."""
    return {"code": status, "message": message, "type": type, **extra}


def json_error(status: int, message: str, type: str, **extra: Any) -> HTTPResponse:
    """A complete error response: ``{"error": {...}}`` with the HTTP status equal to ``error.code``."""
    return json_response({"error": error_object(status, message, type, **extra)}, status)


def _fixed(status: int, message: str, type: str) -> HTTPResponse:
    # The 401/404/503 bodies come from b10621's HTTP layer, which spells them message, type, code.
    return json_response({"error": {"message": message, "type": type, "code": status}}, status)


def not_found() -> HTTPResponse:
    """Unknown route or wrong method: b10621 answers both with this 404."""
    return _fixed(404, "File Not Found", "not_found_error")


def loading() -> HTTPResponse:
    """Every route while no model is loaded."""
    return _fixed(503, "Loading model", "unavailable_error")


def unauthorized() -> HTTPResponse:
    """A missing or wrong API key."""
    return _fixed(401, "Invalid API Key", "authentication_error")


def feature_disabled() -> HTTPResponse:
    """/tools and /cors-proxy when their feature is off (b10621 sends no ``code`` key here)."""
    return json_response({"error": {"message": "this feature is disabled", "type": "feature_disabled"}}, 403)


def translate(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """An exception as (status, envelope inner object); never raises."""
    if isinstance(exc, RequestError):
        return exc.status, error_object(exc.status, exc.message, exc.type, **exc.extra)
    if isinstance(exc, ChatTemplateError):
        # a template that fails on what a request asked for (its messages, its template kwargs)
        return 400, error_object(400, exc.message, "invalid_request_error")
    if isinstance(exc, ValidationError):
        return 400, error_object(400, validation_message(exc), "invalid_request_error")
    if isinstance(exc, (sanic_exc.NotFound, sanic_exc.MethodNotAllowed)):
        return 404, {"message": "File Not Found", "type": "not_found_error", "code": 404}
    if isinstance(exc, sanic_exc.PayloadTooLarge):
        return 413, error_object(413, "request body is larger than the server accepts", "invalid_request_error")
    if isinstance(exc, sanic_exc.SanicException) and exc.status_code < 500:
        return exc.status_code, error_object(exc.status_code, str(exc) or "bad request", "invalid_request_error")
    if isinstance(exc, sanic_exc.SanicException) and exc.status_code == 503:
        return 503, error_object(503, str(exc) or "unavailable", "unavailable_error")
    if isinstance(exc, EngineError):
        return 500, error_object(500, str(exc) or type(exc).__name__, "server_error")
    if isinstance(exc, MlxdError):
        return 500, error_object(500, str(exc) or type(exc).__name__, "server_error")
    return 500, error_object(500, "internal server error", "server_error")


def error_response(exc: BaseException) -> HTTPResponse:
    """The HTTP response for an exception raised while serving a request."""
    if isinstance(exc, asyncio.CancelledError):
        # The client went away before the response (sanic's RequestCancelled): nobody reads this answer, and an
        # ERROR line per dropped connection would let any client write the log.
        log.debug("client disconnected before the response was sent")
        return json_response({"error": error_object(499, "client closed the request", "server_error")}, 499)
    status, body = translate(exc)
    if status >= 500 and not isinstance(exc, (RequestError, sanic_exc.SanicException)):
        log.error("request failed: %s", exc, exc_info=exc)
    retry = exc.retry_after if isinstance(exc, RequestError) else None
    return json_response({"error": body}, status, headers={"Retry-After": str(retry)} if retry is not None else None)


class EnvelopeErrorHandler(ErrorHandler):
    """Sanic's error handler, replaced so that every failure (routing ones included) speaks the envelope."""

    def default(self, request: Request, exception: BaseException) -> HTTPResponse:
        return error_response(exception)

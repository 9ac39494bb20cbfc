"""Request bodies of the admin API (JSON objects, or TOML documents for a whole configuration) and the answer to
a change."""

from __future__ import annotations

import json
import tomllib
from typing import TYPE_CHECKING, Any

from sanic import HTTPResponse, Request

from mlxd.admin.responses import json_response
from mlxd.errors import AdminError
from mlxd.schemas.admin import ChangeResponse

if TYPE_CHECKING:
    from mlxd.admin.host import AdminController
    from mlxd.config.change import ChangeResult


def json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object; ``invalid_body`` otherwise."""
    try:
        body = json.loads(request.body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AdminError("invalid_body", f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise AdminError("invalid_body", "the body must be a JSON object")
    return body


def document(request: Request) -> dict[str, Any]:
    """A whole configuration document: TOML when the content type says so (or the body is not JSON), else JSON."""
    content_type = (request.headers.get("content-type") or "").lower()
    text = (request.body or b"").decode("utf-8", errors="replace")
    if "toml" not in content_type:
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            if "json" in content_type:
                raise AdminError("invalid_body", "the body is not valid JSON") from None
        else:
            if not isinstance(body, dict):
                raise AdminError("invalid_body", "the body must be a JSON object")
            return body
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AdminError("invalid_body", f"the body is neither JSON nor valid TOML: {exc}") from exc


def if_match(request: Request) -> str | None:
    value = request.headers.get("if-match")
    return None if value in (None, "", "*") else value


def change_response(result: "ChangeResult", controller: "AdminController") -> HTTPResponse:
    """A ChangeResult as JSON: 200 when applied (or a no-op, or a clean dry run), 422 ``change_refused`` when the
    change was refused (the running configuration is unchanged)."""
    if result.error is not None:
        raise AdminError("change_refused", result.error, 422)
    body = ChangeResponse(applied=result.applied, generation=result.generation, config_hash=result.config_hash,
                          changed=list(result.changed), pending_restart=list(result.pending_restart),
                          dry_run=result.dry_run, etag=controller.etag)
    return json_response(body.model_dump(), headers={"ETag": f'"{controller.etag}"'})

"""Request bodies of the admin API (JSON objects, or TOML documents for a whole configuration) and the answer to
a change.

A body's shape is bounded before any option is looked at, so that one request cannot hold the event loop (which the
public listener shares): at most MAX_NAMES names in one object and MAX_DEPTH levels of nesting, else 400
``invalid_body``. Nesting deep enough to exhaust the parsers' recursion (200,000 brackets) is the same 400.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from typing import TYPE_CHECKING, Any, TypeVar

from sanic import HTTPResponse, Request

from mlxd.admin.responses import json_response
from mlxd.errors import AdminError
from mlxd.schemas.admin import ChangeResponse

if TYPE_CHECKING:
    from mlxd.admin.host import AdminController
    from mlxd.config.change import ChangeResult


# The option table has a few hundred names; a body naming more than this is not a configuration change.
MAX_NAMES = 512
# A configuration is at most a few levels deep (option = list of values, [models.NAME] tables).
MAX_DEPTH = 32
TOO_DEEP = f"the body is nested deeper than {MAX_DEPTH} levels"
T = TypeVar("T")


def bounded(value: T) -> T:
    """``value`` when no object in it has more than MAX_NAMES names and it nests at most MAX_DEPTH levels;
    ``invalid_body`` otherwise. Iterative, so that the check itself cannot exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[Any] = list(item.values())
            if len(item) > MAX_NAMES:
                raise AdminError("invalid_body", f"the body names {len(item)} keys in one object, more than the "
                                 f"{MAX_NAMES} accepted")
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise AdminError("invalid_body", TOO_DEEP)
        stack.extend((child, depth + 1) for child in children)
    return value


def _few_enough_keys(raw: bytes) -> None:
    """Refuse, before parsing, a JSON body that writes more than MAX_NAMES * 8 keys at any depth: parsing 100,000
    names alone held the event loop for 100 ms. A key is counted where a quote is followed by a colon (``":``,
    ``" :``) and is not an escaped quote inside a string; a count made at C speed on the raw bytes."""
    keys = raw.count(b'":') + raw.count(b'" :') - raw.count(b'\\":') - raw.count(b'\\" :')
    if keys > MAX_NAMES * 8:
        raise AdminError("invalid_body", f"the body names about {keys} keys, more than the {MAX_NAMES} accepted")


def json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object; ``invalid_body`` otherwise."""
    _few_enough_keys(request.body or b"")
    try:
        body = json.loads(request.body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AdminError("invalid_body", f"the body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise AdminError("invalid_body", TOO_DEEP) from None
    if not isinstance(body, dict):
        raise AdminError("invalid_body", "the body must be a JSON object")
    return bounded(body)


def document(request: Request) -> dict[str, Any]:
    """A whole configuration document: TOML when the content type says so (or the body is not JSON), else JSON."""
    content_type = (request.headers.get("content-type") or "").lower()
    text = (request.body or b"").decode("utf-8", errors="replace")
    if "toml" not in content_type:
        _few_enough_keys(request.body or b"")
        try:
            body = json.loads(text)
        except RecursionError:
            raise AdminError("invalid_body", TOO_DEEP) from None
        except json.JSONDecodeError:
            if "json" in content_type:
                raise AdminError("invalid_body", "the body is not valid JSON") from None
        else:
            if not isinstance(body, dict):
                raise AdminError("invalid_body", "the body must be a JSON object")
            return bounded(body)
    try:
        return bounded(tomllib.loads(text))
    except RecursionError:
        raise AdminError("invalid_body", TOO_DEEP) from None
    except tomllib.TOMLDecodeError as exc:
        raise AdminError("invalid_body", f"the body is neither JSON nor valid TOML: {exc}") from exc


async def document_off_loop(request: Request) -> dict[str, Any]:
    """:func:`document` on a thread: TOML is parsed in Python, and a large document would hold the event loop
    (which the public listener shares) for seconds; on a thread the interpreter switches back to the loop every
    few milliseconds."""
    return await asyncio.to_thread(document, request)


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

"""Request bodies: bytes -> JSON -> a pydantic model, every failure an ``InvalidRequest`` with a readable message."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sanic import Request

from mlxd.errors import InvalidRequest
from mlxd.json_types import json_type_name

M = TypeVar("M", bound=BaseModel)


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; b10621's parser (and JSON itself) does not.
    raise ValueError(f"invalid literal {name}")


def _overflow(text: str) -> ValueError:
    # nlohmann's wording: a number past the double range is a parse error there (out_of_range.406).
    return ValueError(f"[json.exception.out_of_range.406] number overflow parsing '{text[:40]}'")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _overflow(text)
    return value


def _bounded_int(text: str) -> int:
    # An integer past every double (more than 308 digits) cannot be any field's value, int or float.
    value = int(text)
    if abs(value) > sys.float_info.max:
        raise _overflow(text)
    return value


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def parse_json(raw: bytes | str) -> Any:
    """Decode one JSON document; malformed, non-UTF-8 or absurdly nested input is an ``InvalidRequest``."""
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float,
                           parse_int=_bounded_int)
        # An escaped half of a surrogate pair (\ud800) decodes to a string that is not Unicode text.
        escaped = raw if isinstance(raw, bytes) else raw.encode("utf-8", errors="surrogatepass")
        if (b"\\ud" in escaped or b"\\uD" in escaped) and _has_lone_surrogate(value):
            raise InvalidRequest("parse error: invalid string: a \\u escape names half of a surrogate pair")
        return value
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"parse error at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except RecursionError as exc:
        raise InvalidRequest("parse error: the JSON document is nested too deeply") from exc
    except ValueError as exc:  # undecodable bytes, NaN/Infinity, overflowing numbers, Python's digit limit
        raise InvalidRequest(f"parse error: {exc}") from exc


_PARSED = "parsed_body"


def json_body(request: Request) -> Any:
    """The request body as JSON (an empty body is malformed JSON, as in b10621), decoded once per request."""
    parsed = getattr(request.ctx, _PARSED, None)
    if parsed is None:
        parsed = _decode(request.body or b"")
        setattr(request.ctx, _PARSED, parsed)
    value, error = parsed
    if error is not None:
        raise error
    return value


def _decode(raw: bytes) -> tuple[Any, InvalidRequest | None]:
    try:
        return parse_json(raw), None
    except InvalidRequest as exc:
        return None, exc


async def decode_large_body(request: Request) -> None:
    """Decode a large body on the offload pool ahead of the route, which then reads it from the request."""
    from mlxd.api import offload

    raw = request.body or b""
    if len(raw) >= offload.INLINE_BYTES and getattr(request.ctx, _PARSED, None) is None:
        setattr(request.ctx, _PARSED, await offload.run(_decode, raw))


def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object."""
    data = json_body(request)
    if not isinstance(data, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {json_type_name(data)}")
    return data


def validation_message(exc: ValidationError) -> str:
    """One line per problem, naming the field the way b10621's messages do (``Field 'n_predict': ...``)."""
    parts = []
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        where = ".".join(str(p) for p in error.get("loc", ()))
        if error.get("type") == "missing":
            parts.append(f"'{where}' is required")
        elif where:
            parts.append(f"Field '{where}': {error.get('msg', 'invalid value')}")
        else:
            parts.append(str(error.get("msg", "invalid value")))
    return "; ".join(parts) or "invalid request"


def parse(model: type[M], data: Any) -> M:
    """Validate decoded JSON against ``model``; a ``ValidationError`` never leaves this function raw."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest(validation_message(exc)) from exc


def parse_body(request: Request, model: type[M]) -> M:
    """The request body validated as ``model``."""
    return parse(model, json_body(request))

"""JSON as mlxd writes it on every listener: raw UTF-8, and non-finite numbers as ``null``.

Python's encoder writes ``NaN``/``Infinity``, which no JSON parser accepts; llama-server's (nlohmann's) writes
them as ``null``. A leaf beside ``mlxd.errors``: the public API, its streams and the admin API all encode here.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

COMPACT = (",", ":")


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (at any depth) replaced by None; other values are returned as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(payload: Any, *, separators: tuple[str, str] | None = COMPACT, indent: int | None = None) -> str:
    """``payload`` as JSON text; the common all-finite case costs one encoding pass."""
    try:
        return json.dumps(payload, ensure_ascii=False, separators=separators, indent=indent, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: encode again with them as null
        return json.dumps(finite(payload), ensure_ascii=False, separators=separators, indent=indent)


def dumps_long_list(items: list[Any], chunk: int = 8192) -> str:
    """A long list as JSON, encoded a chunk at a time: the C encoder holds the GIL for a whole call, so one call
    over millions of items would stall every other thread (the event loop's included) for as long."""
    if len(items) <= chunk:
        return dumps(items)
    return "[" + ",".join(dumps(items[i:i + chunk])[1:-1] for i in range(0, len(items), chunk)) + "]"


# A string no payload of mlxd's holds (a control character each side), to mark where ``template``'s text goes.
SLOT = "\x00slot\x00"


def template(payload: Any) -> Callable[[str], str]:
    """``dumps`` of ``payload`` as a function of the one string in it that is ``SLOT``: the rest is encoded once, then
    each call encodes only its text. A streamed chunk differs from the one before by its text alone: a text
    completion's chunk framed for SSE costs the event loop 3.5 us a token through its dict and ``dumps``, and 0.8 us
    this way (docs/benchmarks.md, section 7)."""
    marker = dumps(SLOT)
    head, found, tail = dumps(payload).partition(marker)
    if not found or marker in tail:
        raise ValueError("template: the payload must hold SLOT exactly once")
    return lambda text: head + json.dumps(text, ensure_ascii=False) + tail
